#include <doctest/doctest.h>

#include <string>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/yaml.hpp"
#include "tests/support/test_support.hpp"

using moesim::testing::error_of;

using moesim::common::InputError;
using moesim::common::UnitKind;
using moesim::common::UsageError;
using moesim::common::YamlDocument;

namespace {

std::string load_error(const std::string& text) {
  return error_of([&] { YamlDocument::load_string(text, "t.yaml"); });
}

}  // namespace

TEST_CASE("yaml: well-formed documents load and typed accessors convert") {
  auto doc = YamlDocument::load_string("a: 3\nb:\n  c: 450GBps\n  d: [1, 2, 3]\nflag: true\nname: x\n", "t.yaml");
  auto root = doc.root();
  CHECK(root.at("a").as_int(1, 10) == 3);
  CHECK(root.at("b").at("c").as_unit(UnitKind::kBandwidth) == doctest::Approx(450e9));
  CHECK(root.at("b").at("d").as_int_list() == std::vector<std::int64_t>{1, 2, 3});
  CHECK(root.at("flag").as_bool());
  CHECK(root.at("b").at("c").path() == "b.c");
  CHECK(root.keys() == std::vector<std::string>{"a", "b", "flag", "name"});
  CHECK_FALSE(root.find("missing"));
  CHECK(doc.content_sha256().size() == 64);
}

TEST_CASE("yaml: errors carry file:line:col and the key path") {
  auto doc = YamlDocument::load_string("model:\n  num_experts: eight\n  top_k: 0\n  bw: 900\n", "s.yaml");
  auto m = doc.root().at("model");
  CHECK(error_of([&] { m.at("num_experts").as_int(1); }) ==
        "s.yaml:2:16: model.num_experts: expected an integer >= 1, got \"eight\"");
  CHECK(error_of([&] { m.at("top_k").as_int(1, 64); }) ==
        "s.yaml:3:10: model.top_k: expected an integer between 1 and 64, got \"0\"");
  CHECK(error_of([&] { m.at("bw").as_unit(UnitKind::kBandwidth); }) ==
        "s.yaml:4:7: model.bw: expected a bandwidth with a unit (e.g. \"450GBps\"), got \"900\"");
  // A missing key has no mark of its own: the parent map's position is reported.
  CHECK(error_of([&] { m.at("hidden_size"); }) ==
        "s.yaml:2:3: model.hidden_size: required key \"hidden_size\" is missing in model");
}

TEST_CASE("yaml: unknown keys are rejected with the closest valid key") {
  auto doc = YamlDocument::load_string("hiden_size: 4\n", "u.yaml");
  const std::string e = error_of([&] { doc.root().allow_keys({"hidden_size", "top_k"}); });
  CHECK(e.starts_with("u.yaml:1:1: hiden_size: unknown key (did you mean \"hidden_size\"?)"));
  CHECK(e.find("valid keys here: hidden_size, top_k") != std::string::npos);
}

TEST_CASE("yaml: hazardous or malformed documents are refused with a clear message") {
  CHECK(load_error("a: 1\na: 2\n").starts_with("t.yaml:2:1: duplicate key \"a\""));
  CHECK(load_error("a: &x 1\nb: *x\n").starts_with("t.yaml:1:4: YAML anchors"));
  CHECK(load_error("a: [1, *y]\n").find("YAML syntax error") != std::string::npos);  // undefined alias
  CHECK(load_error("").starts_with("t.yaml: empty file"));
  CHECK(load_error("# only a comment\n").starts_with("t.yaml: empty file"));
  CHECK(load_error("42\n").starts_with("t.yaml:1:1: the top level must be a map"));
  CHECK(load_error("- a\n- b\n").find("the top level must be a map of keys, got a list") != std::string::npos);
  CHECK(load_error("a:\n\tb: 1\n").starts_with("t.yaml:2:1: tab character in indentation"));
  CHECK(load_error(std::string("a: 1\x00\x01", 6)).starts_with("t.yaml:1:5: binary byte 0x00"));
  CHECK(load_error("a: \xff\xfe\n").starts_with("t.yaml:1:4: invalid UTF-8"));
  CHECK(load_error("a: [1, 2\n").find("YAML syntax error") != std::string::npos);
  CHECK(load_error("a: 1\n---\nb: 2\n").find("more than one YAML document") != std::string::npos);
  CHECK(load_error("? [a, b]\n: 1\n").find("map keys must be plain names") != std::string::npos);
  std::string deep = "a: ";
  for (int i = 0; i < 1000; ++i) deep += "[";
  for (int i = 0; i < 1000; ++i) deep += "]";
  CHECK(load_error(deep).starts_with("t.yaml:1:35: maps and lists nested deeper than 32 levels"));
  std::string block;
  for (int i = 0; i < 40; ++i) block += std::string(2 * static_cast<std::size_t>(i), ' ') + "k" + std::to_string(i) + ":\n";
  CHECK(load_error(block).find("nested deeper than 32 levels") != std::string::npos);
  CHECK(load_error(std::string(1, '[') + "]").starts_with("t.yaml:1:1: the top level must be a map"));
}

// A document the strict pass cannot object to skips it (common/yaml.cpp); everything it objects to
// must still reach it, wherever in the tree it hides, and be reported exactly as before.
TEST_CASE("yaml: the strict checks hold where the strict pass is skipped for plain documents") {
  CHECK(load_error("outer:\n  inner:\n    x: 1\n    y: 2\n    x: 3\n").starts_with("t.yaml:5:5: duplicate key \"x\""));
  CHECK(load_error("a: [1, {p: 1, q: 2, p: 3}]\n").starts_with("t.yaml:1:21: duplicate key \"p\""));
  CHECK(load_error("a: [&x 1, 2]\n").starts_with("t.yaml:1:5: YAML anchors"));
  CHECK(load_error("a: {k: &x 1}\n").starts_with("t.yaml:1:8: YAML anchors"));
  CHECK(load_error("a: 1\n...\nb: 2\n").find("more than one YAML document") != std::string::npos);
  CHECK(load_error("~: 1\n").find("map keys must be plain names") != std::string::npos);
  CHECK(load_error("a:\n  null: 1\n").find("map keys must be plain names") != std::string::npos);
  // '*' and '&' inside scalars are no anchors or aliases.
  auto doc = YamlDocument::load_string("path: summary_*.csv\nq: \"a & b\"\nr: x&y\n", "t.yaml");
  CHECK(doc.root().at("path").as_string() == "summary_*.csv");
  CHECK(doc.root().at("q").as_string() == "a & b");
  CHECK(doc.root().at("r").as_string() == "x&y");
  // The depth limit exactly: the root map and 31 lists are 32 levels and load; one more does not.
  auto nested = [](int lists) {
    std::string t = "a: ";
    for (int i = 0; i < lists; ++i) t += "[";
    t += "1";
    for (int i = 0; i < lists; ++i) t += "]";
    return t + "\n";
  };
  CHECK_NOTHROW(YamlDocument::load_string(nested(31), "t.yaml"));
  CHECK(load_error(nested(32)).starts_with("t.yaml:1:35: maps and lists nested deeper than 32 levels"));
}

TEST_CASE("yaml: an alias bomb is refused at the first alias, not walked") {
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) bomb += (j ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  CHECK(load_error(bomb).find("anchors") != std::string::npos);
}

TEST_CASE("yaml: --set overrides replace or add values and are named in errors") {
  auto doc = YamlDocument::load_string("a: 1\nb:\n  c: 2\n  list: [1, 2]\n", "o.yaml");
  doc.apply_override("b.c=5");
  doc.apply_override("b.list[1]=7");
  doc.apply_override("new.deep.key=x");
  auto root = doc.root();
  CHECK(root.at("b").at("c").as_int() == 5);
  CHECK(root.at("b").at("list").as_int_list() == std::vector<std::int64_t>{1, 7});
  CHECK(root.at("new").at("deep").at("key").as_string() == "x");
  CHECK(root.at("a").as_int() == 1);
  doc.apply_override("a=oops");
  CHECK(error_of([&] { root.at("a").as_int(); }) == "--set a=oops: a: expected an integer, got \"oops\"");
  CHECK(error_of([&] { root.allow_keys({"a", "b"}); }).starts_with("--set new.deep.key=x: new: unknown key"));
  CHECK(error_of([&] { doc.apply_override("novalue"); }).starts_with("usage: --set novalue: expected key.path=value"));
  CHECK(error_of([&] { doc.apply_override("b.list[9]=1"); }).find("past the end") != std::string::npos);
  CHECK(error_of([&] { doc.apply_override("a.b=1"); }).find("not a map") != std::string::npos);
}

TEST_CASE("yaml: --set reaches a key spelled with dots (a sweep's dimension) instead of nesting a new one") {
  auto doc = YamlDocument::load_string("sweep:\n  overlap.policy: [a, b]\n  x.y.z: [1]\n", "s.yaml");
  doc.apply_override("sweep.overlap.policy=[c]");
  doc.apply_override("sweep.x.y.z=[2, 3]");
  doc.apply_override("sweep.power_cap=[300]");
  const auto sweep = doc.root().at("sweep");
  CHECK(sweep.keys() == std::vector<std::string>{"overlap.policy", "x.y.z", "power_cap"});
  REQUIRE(sweep.at("overlap.policy").items().size() == 1);
  CHECK(sweep.at("overlap.policy").items()[0].as_string() == "c");
  CHECK(sweep.at("x.y.z").as_int_list() == std::vector<std::int64_t>{2, 3});
  // The dotted key is named as --set spelled it in errors.
  CHECK(error_of([&] { sweep.at("overlap.policy").as_int(); }).starts_with("--set sweep.overlap.policy=[c]: "));
  CHECK(error_of([&] { sweep.at("x.y.z").as_string(); }).starts_with("--set sweep.x.y.z=[2, 3]: "));
  // A nested map is still walked where no dotted key matches.
  auto nested = YamlDocument::load_string("a:\n  b:\n    c: 1\n", "n.yaml");
  nested.apply_override("a.b.c=2");
  CHECK(nested.root().at("a").at("b").at("c").as_int() == 2);
}

TEST_CASE("hash: CRC-32 and SHA-256 match their published test vectors") {
  CHECK(moesim::common::crc32("123456789", 9) == 0xCBF43926u);
  CHECK(moesim::common::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(moesim::common::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string million(1000000, 'a');
  CHECK(moesim::common::sha256_hex(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
