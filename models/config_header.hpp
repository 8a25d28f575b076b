// The two keys every config file opens with: `schema_version` (this build reads version 1) and `kind`
// (architecture, cluster, ...). The kind is checked before any other key, so that a file of the wrong
// kind is reported as such rather than as a list of unknown keys.
#pragma once

#include <string_view>

#include "common/yaml.hpp"

namespace moesim::models {

inline constexpr int kConfigSchemaVersion = 1;

// Throws InputError when `root` is not a map, or has a `kind` other than `kind`. Call it first.
void check_config_kind(const common::YamlNode& root, std::string_view kind);
// Throws InputError unless `kind` and `schema_version: 1` are both present. Call it after the
// unknown-key check, so that a misspelt `schema_version` is reported with a suggestion.
void check_config_header(const common::YamlNode& root, std::string_view kind);

}  // namespace moesim::models
