#include "common/yaml.hpp"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"

namespace moesim::common {

struct YamlSource {
  std::string name;
  std::string sha256;
  std::map<std::string, std::string> overrides;  // key path -> the whole "--set" assignment
};

namespace {

std::string position(const std::string& name, int line0, int col0) {
  return name + ":" + std::to_string(line0 + 1) + ":" + std::to_string(col0 + 1);
}

std::string position(const std::string& name, const YAML::Mark& m) {
  if (m.is_null()) return name;
  return position(name, m.line, m.column);
}

// Rejects bytes a config file must not contain: NUL and other control bytes, invalid UTF-8, tabs in
// indentation. Reports line and column of the first offence.
void check_text(std::string_view text, const std::string& name) {
  int line = 0;
  int col = 0;
  bool in_indent = true;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++line;
      col = 0;
      in_indent = true;
      continue;
    }
    if (c == '\t' && in_indent)
      throw InputError(position(name, line, col) +
                       ": tab character in indentation; YAML indents with spaces only (replace the tab with spaces)");
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
      throw InputError(position(name, line, col) + ": binary byte 0x" +
                       std::string(1, "0123456789abcdef"[c >> 4]) + std::string(1, "0123456789abcdef"[c & 15]) +
                       " in a text file; is this really a YAML config?");
    if (c >= 0x80) {
      int extra = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
      bool ok = extra > 0 && i + static_cast<std::size_t>(extra) < text.size() + 0;
      for (int k = 1; ok && k <= extra; ++k)
        ok = i + static_cast<std::size_t>(k) < text.size() &&
             (static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]) & 0xc0) == 0x80;
      if (!ok)
        throw InputError(position(name, line, col) + ": invalid UTF-8 byte sequence; is this really a YAML config?");
      i += static_cast<std::size_t>(extra);
    }
    if (c != ' ' && c != '-' && c != '\t') in_indent = false;
    ++col;
  }
}

// One pass over the parser's events before the tree is built: nesting depth, anchors, aliases,
// duplicate and non-scalar keys. Cheap and linear, so a hostile file cannot make us walk 10^9 nodes.
// Skipped where it cannot object (strict_pass_could_object, plain_tree below).
class StrictScanner : public YAML::EventHandler {
 public:
  explicit StrictScanner(const std::string& name) : name_(name) {}
  int documents = 0;

  void OnDocumentStart(const YAML::Mark&) override { ++documents; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { value(mark, anchor, nullptr); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw InputError(position(name_, mark) +
                     ": YAML aliases (*name) are not allowed in config files; write the value out in full");
  }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override { anchor_error(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& v) override {
    value(mark, anchor, &v);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor, false);
  }
  void OnSequenceEnd() override { frames_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor, true);
  }
  void OnMapEnd() override { frames_.pop_back(); }

 private:
  struct Frame {
    bool is_map;
    bool expecting_key = true;
    std::set<std::string> keys;
  };

  void anchor_error(const YAML::Mark& mark) const {
    throw InputError(position(name_, mark) +
                     ": YAML anchors (&name) are not allowed in config files; write the value out in full");
  }

  // A node begins: if it is a map key, check it; flip the key/value state of the enclosing map.
  void begin_node(const YAML::Mark& mark, YAML::anchor_t anchor, const std::string* scalar, bool collection) {
    if (anchor != YAML::NullAnchor) anchor_error(mark);
    if (frames_.empty() || !frames_.back().is_map) return;
    Frame& f = frames_.back();
    if (f.expecting_key) {
      if (collection || scalar == nullptr)
        throw InputError(position(name_, mark) + ": map keys must be plain names, not lists, maps or empty keys");
      if (!f.keys.insert(*scalar).second)
        throw InputError(position(name_, mark) + ": duplicate key \"" + *scalar +
                         "\"; each key may appear once in a map (remove or merge the repeated one)");
    }
    f.expecting_key = !f.expecting_key;
  }

  void value(const YAML::Mark& mark, YAML::anchor_t anchor, const std::string* scalar) {
    begin_node(mark, anchor, scalar, false);
  }

  void open(const YAML::Mark& mark, YAML::anchor_t anchor, bool is_map) {
    begin_node(mark, anchor, nullptr, true);
    if (static_cast<int>(frames_.size()) >= kMaxYamlDepth)
      throw InputError(position(name_, mark) + ": maps and lists nested deeper than " +
                       std::to_string(kMaxYamlDepth) + " levels; config files are never this deep");
    frames_.push_back(Frame{is_map, true, {}});
  }

  const std::string& name_;
  std::vector<Frame> frames_;
};

// The strict pass (StrictScanner) can only object to a document in which a character starts an
// anchor or alias, a line starts with a document marker, or the tree (built from the same parser
// events) holds a null or collection key, a repeated key or deep nesting. Where none of that can be
// the case the pass would accept the file: the tree is kept and the pass skipped. Where it could, the
// pass runs first as always, so every error is reported exactly as the pass reports it.
bool strict_pass_could_object(std::string_view text) {
  // An anchor (&) or alias (*) starts a node, so it never directly follows a letter, digit, '_', '.'
  // or '/': there it is inside a scalar ("summary_*.csv").
  for (std::size_t i = text.find_first_of("&*"); i != std::string_view::npos; i = text.find_first_of("&*", i + 1)) {
    if (i == 0) return true;
    const auto p = static_cast<unsigned char>(text[i - 1]);
    if (!(std::isalnum(p) || p == '_' || p == '.' || p == '/')) return true;
  }
  for (std::size_t line = 0; line < text.size();) {
    const std::string_view head = text.substr(line, 3);
    if (head == "---" || head == "...") return true;
    line = text.find_first_of("\n\r", line);
    if (line == std::string_view::npos) break;
    ++line;
  }
  return false;
}

bool plain_tree(const YAML::Node& node, int depth) {
  if (!node.IsMap() && !node.IsSequence()) return true;
  if (depth + 1 >= kMaxYamlDepth) return false;  // one level early: the pass decides at the limit
  if (node.IsSequence()) {
    for (const auto& item : node)
      if (!plain_tree(item, depth + 1)) return false;
    return true;
  }
  std::set<std::string_view> keys;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar() || !keys.insert(kv.first.Scalar()).second) return false;
    if (!plain_tree(kv.second, depth + 1)) return false;
  }
  return true;
}

std::string node_kind(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return common::quoted(n.Scalar());
}

bool is_integer_text(const std::string& s) {
  std::size_t i = (s.size() > 1 && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i >= s.size()) return false;
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

std::string format_number(double v) {
  std::ostringstream ss;
  ss.precision(15);
  ss << v;
  return ss.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

YamlNode::YamlNode(std::shared_ptr<const YamlSource> source, YAML::Node node, std::string path)
    : source_(std::move(source)), node_(std::move(node)), path_(std::move(path)) {}

std::string YamlNode::location() const {
  for (const auto& [p, assignment] : source_->overrides) {
    auto below = [](const std::string& inner, const std::string& outer) {
      return inner.size() > outer.size() && inner.starts_with(outer) &&
             (inner[outer.size()] == '.' || inner[outer.size()] == '[');
    };
    // The value itself or anything inside it; or a map the override created on its way (no mark).
    if (path_ == p || below(path_, p) || (node_.Mark().is_null() && !path_.empty() && below(p, path_)))
      return "--set " + assignment;
  }
  return position(source_->name, node_.Mark());
}

void YamlNode::fail(std::string_view what) const {
  throw InputError(location() + ": " + (path_.empty() ? std::string("(top level)") : path_) + ": " + std::string(what));
}

void YamlNode::fail_expected(std::string_view expected) const {
  fail("expected " + std::string(expected) + ", got " + node_kind(node_));
}

void YamlNode::expect_map() const {
  if (!node_.IsMap()) fail_expected("a map of keys");
}

bool YamlNode::has(std::string_view key) const {
  expect_map();
  return static_cast<bool>(node_[std::string(key)]);
}

std::optional<YamlNode> YamlNode::find(std::string_view key) const {
  expect_map();
  const std::string k(key);
  YAML::Node child = node_[k];
  if (!child) return std::nullopt;
  return YamlNode(source_, child, path_.empty() ? k : path_ + "." + k);
}

YamlNode YamlNode::at(std::string_view key) const {
  auto child = find(key);
  if (!child) {
    const std::string k(key);
    throw InputError(location() + ": " + (path_.empty() ? k : path_ + "." + k) + ": required key \"" + k +
                     "\" is missing" + (path_.empty() ? "" : " in " + path_));
  }
  return *child;
}

std::vector<std::string> YamlNode::keys() const {
  expect_map();
  std::vector<std::string> out;
  for (const auto& kv : node_) out.push_back(kv.first.Scalar());
  return out;
}

void YamlNode::allow_keys(std::initializer_list<std::string_view> allowed) const {
  allow_keys(std::vector<std::string>(allowed.begin(), allowed.end()));
}

void YamlNode::allow_keys(const std::vector<std::string>& allowed) const {
  expect_map();
  for (const auto& kv : node_) {
    const std::string k = kv.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
    YamlNode key_node(source_, kv.first, path_.empty() ? k : path_ + "." + k);
    key_node.fail("unknown key" + did_you_mean(k, allowed) + "; valid keys here: " + join(allowed, ", "));
  }
}

std::vector<YamlNode> YamlNode::items() const {
  if (!node_.IsSequence()) fail_expected("a list");
  std::vector<YamlNode> out;
  out.reserve(node_.size());
  for (std::size_t i = 0; i < node_.size(); ++i)
    out.emplace_back(source_, node_[i], path_ + "[" + std::to_string(i) + "]");
  return out;
}

std::string YamlNode::as_string() const {
  if (!node_.IsScalar() || node_.Scalar().empty()) fail_expected("a string");
  return node_.Scalar();
}

std::string YamlNode::as_enum(const std::vector<std::string>& allowed) const {
  const std::string expected = "one of " + join(allowed, ", ");
  if (!node_.IsScalar()) fail_expected(expected);
  const std::string& v = node_.Scalar();
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    fail("expected " + expected + ", got " + common::quoted(v) + did_you_mean(v, allowed));
  return v;
}

bool YamlNode::as_bool() const {
  if (node_.IsScalar()) {
    if (node_.Scalar() == "true") return true;
    if (node_.Scalar() == "false") return false;
  }
  fail_expected("true or false");
}

std::int64_t YamlNode::as_int(std::int64_t min, std::int64_t max) const {
  auto range = [&] {
    if (min == std::numeric_limits<std::int64_t>::min() && max == std::numeric_limits<std::int64_t>::max())
      return std::string("an integer");
    if (max == std::numeric_limits<std::int64_t>::max()) return "an integer >= " + std::to_string(min);
    return "an integer between " + std::to_string(min) + " and " + std::to_string(max);
  };
  if (!node_.IsScalar() || !is_integer_text(node_.Scalar())) fail_expected(range());
  const std::string& s = node_.Scalar();
  std::int64_t v = 0;
  const char* begin = s.data() + (s[0] == '+' ? 1 : 0);
  auto [ptr, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < min || v > max) fail_expected(range());
  return v;
}

double YamlNode::as_double(double min, double max) const {
  auto range = [&] {
    std::string r = "a number";
    if (std::isfinite(min) && std::isfinite(max)) r += " between " + format_number(min) + " and " + format_number(max);
    else if (std::isfinite(min)) r += " >= " + format_number(min);
    else if (std::isfinite(max)) r += " <= " + format_number(max);
    return r;
  };
  const auto v = number();
  if (!v || *v < min || *v > max) fail_expected(range());
  return *v;
}

std::optional<double> YamlNode::number() const {
  if (!node_.IsScalar()) return std::nullopt;
  const std::string& s = node_.Scalar();
  double v = 0.0;
  const char* begin = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  auto [ptr, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

double YamlNode::as_unit(UnitKind kind, double min, double max) const {
  const std::string expected =
      std::string(unit_kind_name(kind)) + " with a unit (e.g. \"" + std::string(unit_kind_example(kind)) + "\")";
  if (!node_.IsScalar()) fail_expected(expected);
  auto v = parse_unit(node_.Scalar(), kind);
  if (!v) fail_expected(expected);
  if (*v < min || *v > max) {
    std::string what = std::string(unit_kind_name(kind));
    if (std::isfinite(max)) what += " between " + format_unit(min, kind) + " and " + format_unit(max, kind);
    else if (min > 0) what += " of at least " + format_unit(min, kind);
    else what += " >= 0";
    fail_expected(what);
  }
  return *v;
}

std::vector<std::int64_t> YamlNode::as_int_list(std::int64_t min, std::int64_t max) const {
  std::vector<std::int64_t> out;
  for (const auto& item : items()) out.push_back(item.as_int(min, max));
  return out;
}

// ---------------------------------------------------------------------------------------------------

YamlDocument YamlDocument::load_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": no such file");
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxYamlBytes)
    throw InputError(path + ": " + std::to_string(size) + " bytes is too large for a config file (limit " +
                     std::to_string(kMaxYamlBytes) + ")");
  return load_string(read_file(path), path);
}

YamlDocument YamlDocument::load_string(std::string_view text, const std::string& name) {
  if (text.size() > kMaxYamlBytes)
    throw InputError(name + ": too large for a config file (limit " + std::to_string(kMaxYamlBytes) + " bytes)");
  if (text.size() >= 3 && static_cast<unsigned char>(text[0]) == 0xef && static_cast<unsigned char>(text[1]) == 0xbb &&
      static_cast<unsigned char>(text[2]) == 0xbf)
    text.remove_prefix(3);  // UTF-8 byte-order mark
  check_text(text, name);
  const std::string content(text);
  YamlDocument doc;
  bool parsed = false;
  if (!strict_pass_could_object(text)) {
    try {
      doc.root_ = YAML::Load(content);
      parsed = plain_tree(doc.root_, 0);
    } catch (const YAML::Exception&) {
      parsed = false;  // the full path below reports it
    }
  }
  if (!parsed) {
    std::istringstream in(content);
    StrictScanner scanner(name);
    try {
      YAML::Parser parser(in);
      while (parser.HandleNextDocument(scanner)) {
        if (scanner.documents > 1)
          throw InputError(name + ": more than one YAML document (a second \"---\"); a config file holds one");
      }
    } catch (const YAML::ParserException& e) {
      throw InputError(position(name, e.mark) + ": YAML syntax error: " + e.msg);
    }
    try {
      doc.root_ = YAML::Load(content);
    } catch (const YAML::ParserException& e) {
      throw InputError(position(name, e.mark) + ": YAML syntax error: " + e.msg);
    }
  }
  if (!doc.root_.IsDefined() || doc.root_.IsNull())
    throw InputError(name + ": empty file; expected a YAML map of keys (see docs/config-reference.md)");
  if (!doc.root_.IsMap())
    throw InputError(position(name, doc.root_.Mark()) + ": the top level must be a map of keys, got " +
                     node_kind(doc.root_));
  auto source = std::make_shared<YamlSource>();
  source->name = name;
  source->sha256 = sha256_hex(content);
  doc.source_ = std::move(source);
  return doc;
}

void YamlDocument::apply_override(std::string_view assignment) {
  const std::string a(assignment);
  const auto eq = a.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("--set " + a + ": expected key.path=value (for example --set workload.steps=200)");
  const std::string path = a.substr(0, eq);
  const std::string text = a.substr(eq + 1);
  YAML::Node value;
  try {
    StrictScanner scanner("--set " + a);
    std::istringstream in(text);
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(scanner)) {
    }
    value = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw UsageError("--set " + a + ": the value is not valid YAML: " + e.msg);
  } catch (const InputError& e) {
    throw UsageError(e.what());
  }

  // Split "a.b[2].c" into segments; a segment is a key or an index.
  struct Segment {
    std::string key;
    long index = -1;
  };
  std::vector<Segment> segments;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.') {
      ++i;
      continue;
    }
    if (path[i] == '[') {
      const auto close = path.find(']', i);
      const std::string num = close == std::string::npos ? "" : path.substr(i + 1, close - i - 1);
      if (num.empty() || !std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
        throw UsageError("--set " + a + ": bad index in key path \"" + path + "\" (expected name[0])");
      segments.push_back({"", std::stol(num)});
      i = close + 1;
      continue;
    }
    std::size_t j = i;
    while (j < path.size() && path[j] != '.' && path[j] != '[') ++j;
    segments.push_back({path.substr(i, j - i), -1});
    i = j;
  }
  if (segments.empty() || segments.front().index >= 0)
    throw UsageError("--set " + a + ": expected key.path=value");

  YAML::Node cur;
  cur.reset(root_);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const bool last = s + 1 == segments.size();
    const Segment& seg = segments[s];
    if (seg.index >= 0) {
      if (!cur.IsSequence() || static_cast<std::size_t>(seg.index) >= cur.size())
        throw UsageError("--set " + a + ": \"" + path + "\" indexes past the end of a list (or into a non-list)");
      if (last) {
        cur[static_cast<std::size_t>(seg.index)] = value;
      } else {
        YAML::Node next = cur[static_cast<std::size_t>(seg.index)];
        cur.reset(next);
      }
      continue;
    }
    if (!cur.IsMap() && !cur.IsNull())
      throw UsageError("--set " + a + ": \"" + seg.key + "\" is below a value that is not a map");
    // A map may spell a path in one dotted key (a sweep's `overlap.policy: [...]`): the longest run of
    // the path's names that is a key of this map is that key.
    if (cur.IsMap()) {
      const YAML::Node view = cur;  // const lookups add no key
      std::string joined = seg.key;
      std::size_t found = s;
      for (std::size_t k = s + 1; k < segments.size() && segments[k].index < 0; ++k) {
        joined += "." + segments[k].key;
        if (view[joined]) found = k;
      }
      if (found > s) {
        std::string key = seg.key;
        for (std::size_t k = s + 1; k <= found; ++k) key += "." + segments[k].key;
        segments[s].key = key;
        segments.erase(segments.begin() + static_cast<long>(s) + 1, segments.begin() + static_cast<long>(found) + 1);
        --s;  // walk the merged segment again
        continue;
      }
    }
    if (last) {
      cur[seg.key] = value;
    } else {
      if (!cur[seg.key]) cur[seg.key] = YAML::Node(YAML::NodeType::Map);
      YAML::Node next = cur[seg.key];
      cur.reset(next);
    }
  }
  // Normalise "a.b[2]" spelling to the path YamlNode builds.
  std::string normalised;
  for (const auto& seg : segments) {
    if (seg.index >= 0) normalised += "[" + std::to_string(seg.index) + "]";
    else normalised += (normalised.empty() ? "" : ".") + seg.key;
  }
  source_->overrides[normalised] = a;
}

void YamlDocument::apply_overrides(const std::vector<std::string>& assignments) {
  for (const auto& a : assignments) apply_override(a);
}

YamlNode YamlDocument::root() const { return YamlNode(source_, root_, ""); }
const std::string& YamlDocument::name() const { return source_->name; }
const std::string& YamlDocument::content_sha256() const { return source_->sha256; }

}  // namespace moesim::common
