// Fuzz target: the strict YAML loader (common/yaml.cpp): load, walk every node, apply an override.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/yaml.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_clean([&] {
    auto doc = common::YamlDocument::load_string(text, "fuzz.yaml");
    std::function<void(const common::YamlNode&)> walk = [&](const common::YamlNode& node) {
      (void)node.location();
      if (node.is_map()) {
        for (const auto& key : node.keys()) walk(node.at(key));
      } else if (node.is_sequence()) {
        for (const auto& item : node.items()) walk(item);
      } else if (node.is_scalar()) {
        (void)node.number();
      }
    };
    walk(doc.root());
    doc.apply_override("a.b[0]=1");
  });
  return 0;
}
