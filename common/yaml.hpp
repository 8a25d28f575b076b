// The strict YAML layer every config file goes through. Loading rejects what a hand-written config
// must not contain (anchors and aliases, nesting deeper than kMaxYamlDepth, duplicate keys, tab
// indentation, binary bytes, an empty document, a root that is not a map). YamlNode accessors throw
// InputError in the form `file:line:col: key.path: expected ..., got "..."` (1-based line and column;
// a missing key is reported at its parent map). Values set by `--set key.path=value` are reported as
// `--set key.path=value` instead of a file position.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/enum_table.hpp"
#include "common/units.hpp"

namespace moesim::common {

inline constexpr int kMaxYamlDepth = 32;                      // maps and sequences nested at most this deep
inline constexpr std::size_t kMaxYamlBytes = 16u << 20;       // larger config files are refused

struct YamlSource;  // file name, overrides: shared by every node of one document

class YamlNode {
 public:
  YamlNode(std::shared_ptr<const YamlSource> source, YAML::Node node, std::string path);

  const std::string& path() const { return path_; }
  std::string location() const;                         // "file:line:col" or "--set a.b=v"
  [[noreturn]] void fail(std::string_view what) const;  // throws InputError "location: path: what"
  [[noreturn]] void fail_expected(std::string_view expected) const;  // "... expected X, got "Y""

  bool is_map() const { return node_.IsMap(); }
  bool is_sequence() const { return node_.IsSequence(); }
  bool is_scalar() const { return node_.IsScalar(); }
  bool is_null() const { return node_.IsNull(); }

  // Maps. `at` requires the key (a missing key is an error at this map); `find` returns nullopt.
  void expect_map() const;
  bool has(std::string_view key) const;
  YamlNode at(std::string_view key) const;
  std::optional<YamlNode> find(std::string_view key) const;
  std::vector<std::string> keys() const;  // in document order
  // Every key of this map must be one of `allowed`; an unknown one is an error naming the closest.
  void allow_keys(std::initializer_list<std::string_view> allowed) const;
  void allow_keys(const std::vector<std::string>& allowed) const;

  // Sequences.
  std::vector<YamlNode> items() const;  // error if not a sequence

  // Scalars.
  std::string as_string() const;  // any non-empty scalar
  std::string as_enum(const std::vector<std::string>& allowed) const;
  // One of an enum's names (common/enum_table.hpp), as its value; the error lists the table's names.
  template <typename E>
  E as_enum(std::span<const EnumName<E>> table) const {
    return *enum_from_name<E>(table, as_enum(enum_names<E>(table)));
  }
  bool as_bool() const;  // "true" or "false" only
  std::int64_t as_int(std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                      std::int64_t max = std::numeric_limits<std::int64_t>::max()) const;
  double as_double(double min = -std::numeric_limits<double>::infinity(),
                   double max = std::numeric_limits<double>::infinity()) const;
  // The scalar as a finite number (a leading '+' allowed), or nullopt: for values that are a number
  // or a word ("auto"), whose caller words the error.
  std::optional<double> number() const;
  // A value with a unit ("900GBps"); min/max are SI values, checked after conversion.
  double as_unit(UnitKind kind, double min = 0.0, double max = std::numeric_limits<double>::infinity()) const;
  std::vector<std::int64_t> as_int_list(std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                                        std::int64_t max = std::numeric_limits<std::int64_t>::max()) const;

  const YAML::Node& raw() const { return node_; }

 private:
  std::shared_ptr<const YamlSource> source_;
  YAML::Node node_;
  std::string path_;
};

class YamlDocument {
 public:
  // Throws InputError naming the file (and line and column where there is one).
  static YamlDocument load_file(const std::string& path);
  static YamlDocument load_string(std::string_view text, const std::string& name);

  // Applies `key.path=value` (value parsed as a YAML scalar or flow collection; `a.b[2]=x` indexes a
  // sequence). Missing maps on the path are created. Throws UsageError on a malformed assignment.
  void apply_override(std::string_view assignment);
  void apply_overrides(const std::vector<std::string>& assignments);

  YamlNode root() const;
  const std::string& name() const;
  const std::string& content_sha256() const;  // of the file's bytes, before overrides

 private:
  YamlDocument() = default;
  std::shared_ptr<YamlSource> source_;
  YAML::Node root_;
};

}  // namespace moesim::common
