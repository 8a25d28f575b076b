#include "calibrate/report.hpp"

#include <cstdio>
#include <string>

#include "calibrate/stats.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

namespace {

std::string fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

}  // namespace

std::string nccl_type_name(int type_size) { return type_size == 2 ? "bfloat16" : type_size == 1 ? "int8" : "float"; }

void print_context(std::ostream& out, const DeviceInfo& d, const std::string& plan) {
  out << "# moesim-calibrate, plan " << plan << ", " << d.build << "\n"
      << "# Using devices\n"
      << fmt("#  Rank %2d device %2d [%s] %s, %d SMs, %.1f GiB, L2 %.0f MiB, sm %.0f MHz, mem %.0f MHz\n", 0, d.index,
             d.pci_bus_id.c_str(), d.name.c_str(), d.sm_count, d.memory / 1073741824.0, d.l2_bytes / 1048576.0,
             d.max_sm_clock / 1e6, d.max_mem_clock / 1e6)
      << "#  GPUs driven: " << d.gpu_count << ", compute capability " << d.compute_capability / 10 << "."
      << d.compute_capability % 10 << ", fp8 " << (d.fp8 ? "yes" : "no") << "\n"
      << "#  driver " << d.driver << ", CUDA runtime " << d.cuda_runtime << ", cuBLASLt " << d.cublaslt << ", NCCL "
      << (d.nccl ? d.nccl_version : std::string("not loaded")) << ", NVML " << (d.nvml ? "yes" : "no") << "\n"
      << fmt("#  power limit %.0f W (default %.0f W, settable %.0f..%.0f W), PCIe Gen%d x%d, host %s\n", d.power_limit,
             d.default_power_limit, d.min_power_limit, d.max_power_limit, d.pcie_generation, d.pcie_width, d.host.c_str());
}

void print_gemm_header(std::ostream& out) {
  out << "#\n# GEMM C[m,n] = A[m,k] B[k,n] (cuBLASLt, CUDA events, median of samples)\n"
      << fmt("# %6s %8s %8s %8s %12s %12s %12s %6s %9s\n", "dtype", "m", "n", "k", "time", "p10", "p90", "cv", "TFLOP/s")
      << fmt("# %6s %8s %8s %8s %12s %12s %12s %6s %9s\n", "", "", "", "", "(us)", "(us)", "(us)", "(%)", "");
}

void print_gemm_row(std::ostream& out, const GemmRecord& r) {
  out << fmt("  %6s %8ld %8ld %8ld %12.2f %12.2f %12.2f %6.1f %9.1f\n", models::dtype_name(r.op.dtype).c_str(), r.op.m,
             r.op.n, r.op.k, r.time.median * 1e6, r.time.p10 * 1e6, r.time.p90 * 1e6, r.time.cv * 100.0, r.tflops())
      << std::flush;
}

void print_grouped_row(std::ostream& out, const GroupedRecord& r) {
  out << fmt("  grouped %-34s %3zu GEMMs %12.2f us grouped %12.2f us one by one %7.1f TFLOP/s\n", r.label.c_str(),
             r.work.size(), r.time.median * 1e6, r.singles_sum * 1e6,
             r.time.median > 0 ? work_flops(r.work) / r.time.median / 1e12 : 0.0)
      << std::flush;
}

void print_collective_header(std::ostream& out) {
  out << "#\n# Collectives (NCCL, out-of-place; algbw = size / time, busbw = algbw * factor as nccl-tests)\n"
      << fmt("# %-14s %5s %12s %12s %8s %8s %10s %8s %8s %6s %s\n", "op", "ranks", "size", "count", "type", "redop",
             "time", "algbw", "busbw", "#wrong", "traffic")
      << fmt("# %-14s %5s %12s %12s %8s %8s %10s %8s %8s %6s\n", "", "", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
             "(GB/s)", "");
}

void print_collective_row(std::ostream& out, const CollectiveRecord& r) {
  const models::CollectiveOp op = r.traffic.op.value();
  const long count = models::nccl_tests_count(op, r.traffic.ranks, r.traffic.bytes, 4);
  const char* redop =
      op == models::CollectiveOp::kAllReduce || op == models::CollectiveOp::kReduceScatter ? "sum" : "none";
  out << fmt("  %-14s %5d %12.0f %12ld %8s %8s %10.2f %8.2f %8.2f %6ld %s\n", models::collective_op_name(op).c_str(),
             r.traffic.ranks, r.traffic.bytes, count, "float", redop, r.time.median * 1e6, r.algbw() / 1e9,
             r.busbw() / 1e9, r.wrong, r.label.c_str())
      << std::flush;
}

void print_traffic_row(std::ostream& out, const TrafficRecord& r) {
  out << fmt("  %-24s %12.0f B %10.2f us %9.1f GB/s (p10 %.2f us, p90 %.2f us)\n", traffic_label(r.traffic).c_str(),
             r.traffic.bytes, r.time.median * 1e6, r.rate() / 1e9, r.time.p10 * 1e6, r.time.p90 * 1e6)
      << std::flush;
}

void print_contention_header(std::ostream& out) {
  out << "#\n# Contention: each side alone and while the other runs throughout on a second stream\n"
      << fmt("# %-5s %16s %7s %-22s %10s %10s %10s %6s %10s %10s %6s %7s %-10s\n", "dtype", "gemm m*n*k", "GFLOP",
             "traffic", "bytes", "gemm", "gemm+comm", "slow", "comm", "comm+gemm", "slow", "overlap", "status")
      << fmt("# %-5s %16s %7s %-22s %10s %10s %10s %6s %10s %10s %6s %7s\n", "", "", "", "", "(MiB)", "(us)", "(us)", "(x)",
             "(us)", "(us)", "(x)", "(%)");
}

void print_contention_row(std::ostream& out, const ContentionRecord& r) {
  const GemmOp& g = r.gemm.front();
  const std::string shape = std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k);
  out << fmt("  %-5s %16s %7.1f %-22s %10.1f %10.2f %10.2f %6.3f %10.2f %10.2f %6.3f %7.1f %-10s\n",
             models::dtype_name(r.dtype).c_str(),
             shape.c_str(), work_flops(r.gemm) / 1e9, traffic_label(r.traffic).c_str(), r.traffic.bytes / 1048576.0,
             r.gemm_alone.median * 1e6, r.gemm_overlapped.median * 1e6, r.compute_slowdown(), r.comm_alone.median * 1e6,
             r.comm_overlapped.median * 1e6, r.comm_slowdown(),
             100.0 * std::min(r.run.gemm_overlap, r.run.comm_overlap), r.overlapped() ? "ok" : "NO-OVERLAP")
      << std::flush;
}

void print_power_header(std::ostream& out) {
  out << "#\n# Power (NVML energy counter over each state)\n"
      << fmt("# %-14s %-5s %8s %10s %9s %9s %9s %8s %6s %9s %9s\n", "state", "dtype", "time", "energy", "avg", "sampled",
             "sm clk", "mem clk", "temp", "TFLOP/s", "limit")
      << fmt("# %-14s %-5s %8s %10s %9s %9s %9s %8s %6s %9s %9s\n", "", "", "(s)", "(J)", "(W)", "(W)", "(MHz)", "(MHz)",
             "(C)", "", "(W/MHz)");
}

void print_power_row(std::ostream& out, const PowerRecord& r) {
  const double limit = r.clock_limit > 0 ? r.clock_limit / 1e6 : r.power_limit;
  const std::string dtype = r.state.dtype ? models::dtype_name(*r.state.dtype) : "-";
  out << fmt("  %-14s %-5s %8.2f %10.1f %9.1f %9.1f %9.0f %8.0f %6.0f %9.1f %9.0f\n", r.state.state.c_str(),
             dtype.c_str(), r.run.seconds, r.run.energy, r.run.average_power,
             r.run.sampled_power, r.run.sm_clock / 1e6, r.run.mem_clock / 1e6, r.run.temperature, r.run.work_rate / 1e12,
             limit)
      << std::flush;
}

}  // namespace moesim::calibrate
