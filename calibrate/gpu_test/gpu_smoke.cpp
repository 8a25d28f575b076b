// GPU smoke test (CTest label gpu): one small GEMM, a copy-kernel run, an overlapped pair and the
// fitted profile parsed back. Exit 77 (CTest: skipped) where no usable GPU is found; 1 on failure.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "calibrate/device.hpp"
#include "calibrate/fit.hpp"
#include "calibrate/runner.hpp"
#include "models/profile.hpp"

namespace mc = moesim::calibrate;

namespace {
int fail(const std::string& what) {
  std::fprintf(stderr, "gpu smoke test failed: %s\n", what.c_str());
  return 1;
}
}  // namespace

int main() {
  std::unique_ptr<mc::Device> device;
  try {
    device = mc::open_device({});
  } catch (const mc::NoGpuError& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  try {
    constexpr auto bf16 = moesim::models::Dtype::kBf16;
    mc::Plan plan;
    plan.dtypes = {bf16};
    plan.gemm_timing = {2, 5, 0, 50e-6};
    plan.gemms.push_back({bf16, 4096, 4096, {1, 256, 4096}});
    plan.grouped.push_back(
        {bf16,
         "smoke x4",
         {{bf16, 64, 4096, 4096}, {bf16, 32, 4096, 4096}, {bf16, 16, 4096, 4096}, {bf16, 8, 4096, 4096}}});
    plan.single_gpu_traffic.push_back({"copy_kernel", std::nullopt, 268435456.0, 1, 0, {}});
    plan.contention.push_back(
        {{{bf16, 8192, 4096, 4096}}, bf16, {"copy_kernel", std::nullopt, 67108864.0, 1, 16, {}}, true, std::nullopt});
    std::ostringstream log;
    const mc::Measurements m = mc::run_plan(*device, plan, log, {});
    std::cout << log.str();
    for (const mc::GemmRecord& r : m.gemms)
      if (!(r.tflops() > 0.01 && r.tflops() < 5000)) return fail("implausible GEMM rate");
    if (!(m.traffic.front().rate() > 1e10)) return fail("copy kernel slower than 10 GB/s");
    if (m.contention.front().run.gemm_overlap < 0.5) return fail("the overlapped pair did not overlap");
    const moesim::models::Profile base = moesim::models::load_profile("h100-sxm");
    mc::profile_text(mc::fit_profile(m, base, {"smoke", "h100-sxm", "gpu smoke test"}), "smoke.yaml");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  std::printf("gpu smoke test passed\n");
  return 0;
}
