#include "calibrate/cuda/libs.hpp"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>

#include "common/error.hpp"

namespace moesim::calibrate::cuda {

void fail(const char* file, int line, const std::string& call, const std::string& message) {
  throw common::RunError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + message);
}

namespace {

std::vector<std::string> expand(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

// Python environments where PyTorch's nvidia-* wheels put their libraries.
std::vector<std::string> wheel_globs(const std::string& sub) {
  std::vector<std::string> roots = {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                                    "/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages",
                                    "/opt/venv/lib/python3*/site-packages"};
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(env)) roots.push_back(std::string(v) + "/lib/python3*/site-packages");
  if (const char* home = std::getenv("HOME")) roots.push_back(std::string(home) + "/.local/lib/python3*/site-packages");
  std::vector<std::string> out;
  for (const std::string& r : roots) out.push_back(r + "/" + sub);
  return out;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

Library::Library(const std::string& what, const std::string& env_var, const std::vector<std::string>& candidates,
                 bool required)
    : what_(what) {
  std::vector<std::string> tried;
  auto attempt = [&](const std::string& p) {
    tried.push_back(p);
    handle_ = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_) path_ = p;
    return handle_ != nullptr;
  };
  if (const char* v = std::getenv(env_var.c_str()); v && *v && attempt(v)) return;
  // In order: a bare soname goes through the loader's search (LD_LIBRARY_PATH, ld.so.cache); a path
  // with a wildcard is expanded, each match tried; a plain path is tried as is.
  for (const std::string& c : candidates) {
    if (c.find_first_of("*?[") == std::string::npos) {
      if (attempt(c)) return;
      continue;
    }
    for (const std::string& p : expand(c))
      if (attempt(p)) return;
  }
  failure_ = what + " not found (set " + env_var + " to its path); tried: ";
  for (std::size_t i = 0; i < tried.size() && i < 12; ++i) failure_ += (i ? ", " : "") + tried[i];
  if (required) throw common::RunError(failure_);
}

Library::~Library() {
  if (handle_) ::dlclose(handle_);
}

void* Library::symbol(const char* name) const {
  void* s = handle_ ? ::dlsym(handle_, name) : nullptr;
  if (!s) throw common::RunError(what_ + " at " + path_ + " lacks " + name + " (too old a version?)");
  return s;
}

#define MOESIM_LOAD(name) name = reinterpret_cast<decltype(name)>(lib.symbol(#name))

namespace {

// cuBLASLt's soname carries the toolkit's major version (libcublasLt.so.12, .so.13). The major this
// file was compiled against comes first; then the other supported majors (12 and 13), newest first,
// so that a CUDA 12 build still runs where only CUDA 13's cuBLASLt is installed (PyTorch cu13 wheels)
// and the other way round. Mixing is safe for what this tool calls: every entry point it loads and
// every enum value it passes (CUDA_R_*, CUBLAS_COMPUTE_32F*, CUBLASLT_MATMUL_DESC_TRANSA/B,
// CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) and the algo/heuristic structs have the same values and
// sizes in the 11.8 and 13.0 headers (compared by a probe built against both; 12.x lies between and
// was not at hand). The version loaded is in every profile (device extra: cublaslt) and the raw JSON
// also has its path (cublaslt_path), so a mixed run is visible. A cuBLASLt newer than the driver
// fails at its first call with cuBLAS's own message.
std::vector<std::string> cublaslt_candidates() {
  std::vector<int> majors = {CUBLAS_VER_MAJOR};
  for (int m : {13, 12})
    if (m != CUBLAS_VER_MAJOR) majors.push_back(m);
  std::vector<std::string> out;
  for (int m : majors) {
    const std::string so = "libcublasLt.so." + std::to_string(m);
    out.push_back(so);
    out.push_back("/usr/local/cuda/lib64/" + so);
    out.push_back("/usr/local/cuda-" + std::to_string(m) + "*/lib64/" + so);
    // PyTorch's wheels: nvidia-cublas-cu12 puts it in nvidia/cublas/lib, CUDA 13's in nvidia/cu13/lib.
    out = with(out, wheel_globs("nvidia/cu" + std::to_string(m) + "/lib/" + so));
    out = with(out, wheel_globs("nvidia/cublas/lib/" + so));
  }
  return out;
}

}  // namespace

CublasLt::CublasLt() : lib("cuBLASLt", "MOESIM_CUBLASLT_LIBRARY", cublaslt_candidates(), true) {
  MOESIM_LOAD(cublasLtCreate);
  MOESIM_LOAD(cublasLtDestroy);
  MOESIM_LOAD(cublasLtGetVersion);
  MOESIM_LOAD(cublasLtGetStatusString);
  MOESIM_LOAD(cublasLtMatmulDescCreate);
  MOESIM_LOAD(cublasLtMatmulDescDestroy);
  MOESIM_LOAD(cublasLtMatmulDescSetAttribute);
  MOESIM_LOAD(cublasLtMatrixLayoutCreate);
  MOESIM_LOAD(cublasLtMatrixLayoutDestroy);
  MOESIM_LOAD(cublasLtMatmulPreferenceCreate);
  MOESIM_LOAD(cublasLtMatmulPreferenceDestroy);
  MOESIM_LOAD(cublasLtMatmulPreferenceSetAttribute);
  MOESIM_LOAD(cublasLtMatmulAlgoGetHeuristic);
  MOESIM_LOAD(cublasLtMatmul);
}

Nccl::Nccl(bool required)
    : lib("NCCL", "MOESIM_NCCL_LIBRARY",
          with(with({"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"},
                    wheel_globs("nvidia/nccl/lib/libnccl.so.2")),
               wheel_globs("nvidia/cu*/lib/libnccl.so.2")),
          required) {
  if (!lib.loaded()) return;
  MOESIM_LOAD(ncclGetVersion);
  MOESIM_LOAD(ncclGetUniqueId);
  MOESIM_LOAD(ncclCommInitRank);
  MOESIM_LOAD(ncclCommInitRankConfig);
  MOESIM_LOAD(ncclCommDestroy);
  MOESIM_LOAD(ncclCommAbort);
  MOESIM_LOAD(ncclGetErrorString);
  MOESIM_LOAD(ncclGroupStart);
  MOESIM_LOAD(ncclGroupEnd);
  MOESIM_LOAD(ncclAllReduce);
  MOESIM_LOAD(ncclAllGather);
  MOESIM_LOAD(ncclReduceScatter);
  MOESIM_LOAD(ncclSend);
  MOESIM_LOAD(ncclRecv);
}

// NVML comes with the driver, not the toolkit: its soname (.so.1) is the same under CUDA 12 and 13 drivers.
Nvml::Nvml()
    : lib("NVML", "MOESIM_NVML_LIBRARY",
          {"libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1"}, false) {
  if (!lib.loaded()) return;
  MOESIM_LOAD(nvmlInit_v2);
  MOESIM_LOAD(nvmlShutdown);
  MOESIM_LOAD(nvmlErrorString);
  MOESIM_LOAD(nvmlSystemGetDriverVersion);
  MOESIM_LOAD(nvmlDeviceGetHandleByPciBusId_v2);
  MOESIM_LOAD(nvmlDeviceGetTotalEnergyConsumption);
  MOESIM_LOAD(nvmlDeviceGetPowerUsage);
  MOESIM_LOAD(nvmlDeviceGetClockInfo);
  MOESIM_LOAD(nvmlDeviceGetMaxClockInfo);
  MOESIM_LOAD(nvmlDeviceGetTemperature);
  MOESIM_LOAD(nvmlDeviceGetPowerManagementLimit);
  MOESIM_LOAD(nvmlDeviceGetPowerManagementDefaultLimit);
  MOESIM_LOAD(nvmlDeviceGetPowerManagementLimitConstraints);
  MOESIM_LOAD(nvmlDeviceSetPowerManagementLimit);
  MOESIM_LOAD(nvmlDeviceSetGpuLockedClocks);
  MOESIM_LOAD(nvmlDeviceResetGpuLockedClocks);
  MOESIM_LOAD(nvmlDeviceGetCurrPcieLinkGeneration);
  MOESIM_LOAD(nvmlDeviceGetCurrPcieLinkWidth);
  initialized = nvmlInit_v2() == kNvmlSuccess;
}

Nvml::~Nvml() {
  if (initialized) nvmlShutdown();
}

#undef MOESIM_LOAD

}  // namespace moesim::calibrate::cuda
