// The dtype and collective-op name tables: every value has exactly one name, the names are the files'
// spellings, and a name read back is the value written; YAML reads a name through its table; a
// contention grid without an op is "any".
#include <doctest/doctest.h>

#include <array>
#include <set>
#include <string>
#include <vector>

#include "common/enum_table.hpp"
#include "common/yaml.hpp"
#include "models/collective_op.hpp"
#include "models/dtype.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

using moesim::models::CollectiveOp;
using moesim::models::Dtype;

namespace {

// Every value from the first enumerator to `last` (the enums number theirs from 0 without gaps).
template <typename E, std::size_t N>
void check_table(const std::array<moesim::common::EnumName<E>, N>& table, E last) {
  const auto count = static_cast<std::size_t>(last) + 1;
  CHECK(table.size() == count);
  std::set<std::string> names;
  for (std::size_t i = 0; i < count; ++i) {
    const auto value = static_cast<E>(i);
    const std::string name = moesim::common::enum_name<E>(table, value);
    CAPTURE(name);
    CHECK(name != "?");
    CHECK(names.insert(name).second);
    CHECK(moesim::common::enum_from_name<E>(table, name) == value);
  }
}

}  // namespace

TEST_CASE("model enums: every dtype and collective op has one name, and names round-trip") {
  check_table(moesim::models::kDtypes, Dtype::kTf32);
  check_table(moesim::models::kCollectiveOps, CollectiveOp::kSendRecv);
  CHECK(moesim::common::enum_names<Dtype>(moesim::models::kDtypes) ==
        std::vector<std::string>{"bf16", "fp16", "fp8", "fp32", "tf32"});
  CHECK(moesim::common::enum_names<CollectiveOp>(moesim::models::kCollectiveOps) ==
        std::vector<std::string>{"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"});
  CHECK(moesim::models::dtype_name(Dtype::kFp8) == "fp8");
  CHECK(moesim::models::collective_op_name(CollectiveOp::kAllToAll) == "all_to_all");
  CHECK_FALSE(moesim::common::enum_from_name<Dtype>(moesim::models::kDtypes, "bf8"));
}

TEST_CASE("model enums: YAML reads a name through its table and lists the names when it is not one") {
  const auto doc = moesim::common::YamlDocument::load_string("a: fp8\nb: all_2_all\n", "t.yaml");
  CHECK(doc.root().at("a").as_enum<Dtype>(moesim::models::kDtypes) == Dtype::kFp8);
  const std::string error =
      moesim::testing::error_of([&] { doc.root().at("b").as_enum<CollectiveOp>(moesim::models::kCollectiveOps); });
  CHECK(error ==
        "t.yaml:2:4: b: expected one of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, got "
        "\"all_2_all\" (did you mean \"all_to_all\"?)");
}

TEST_CASE("model enums: a contention grid's op is a collective's name, or \"any\" for none") {
  CHECK(moesim::models::contention_op_name(std::nullopt) == "any");
  CHECK(moesim::models::contention_op_name(CollectiveOp::kAllGather) == "all_gather");
}
