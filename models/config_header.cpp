#include "models/config_header.hpp"

#include <string>

namespace moesim::models {

void check_config_kind(const common::YamlNode& root, std::string_view kind) {
  root.expect_map();
  if (auto k = root.find("kind")) {
    if (!k->is_scalar() || k->as_string() != kind)
      k->fail_expected("\"" + std::string(kind) + "\" (the file is read as a config of kind " + std::string(kind) +
                       ")");
  }
}

void check_config_header(const common::YamlNode& root, std::string_view kind) {
  check_config_kind(root, kind);
  const common::YamlNode version = root.at("schema_version");
  if (version.as_int(1) != kConfigSchemaVersion)
    version.fail_expected("schema version " + std::to_string(kConfigSchemaVersion) +
                          " (the only one this build reads)");
  root.at("kind");
}

}  // namespace moesim::models
