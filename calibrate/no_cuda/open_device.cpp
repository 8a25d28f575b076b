// The device entry points of a build without CUDA: every measurement path reports "no GPU".
#include "calibrate/device.hpp"

namespace moesim::calibrate {

namespace {
const char* kWhy =
    "this moesim-calibrate was built without CUDA (no CUDA toolkit found at configure time, or "
    "MOESIM_CALIBRATE=OFF); rebuild where /usr/local/cuda exists to measure (--dry-run works without one)";
}

std::string build_description() { return "built without CUDA"; }
std::vector<std::string> list_devices() { throw NoGpuError(kWhy); }
std::unique_ptr<Device> open_device(const DeviceRequest&) { throw NoGpuError(kWhy); }

}  // namespace moesim::calibrate
