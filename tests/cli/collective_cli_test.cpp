// `moesim collective` as a user runs it: nccl-tests' table of a lone collective, JSON, --compare
// against an nccl-tests output file, and each bad input with its message and exit code 2.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_support.hpp"

using namespace moesim::testing;

namespace {

std::string sample(const char* name) { return (test_data_dir() / "nccl-tests" / name).string(); }

}  // namespace

TEST_CASE("collective: nccl-tests' table of a lone all_reduce, reproducing the profile's curve") {
  const auto r = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "-b", "1K", "-e", "8G"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("# moesim collective: all_reduce on 8 GPUs of cluster h100-sxm-8gpu, profile h100-sxm") !=
        std::string::npos);
  CHECK(r.out.find("#       size         count      type      time     algbw     busbw") != std::string::npos);
  // The profile's (Azure's) 8 GiB point: 478.87 GB/s bus bandwidth.
  CHECK(r.out.find("  8589934592    2147483648     float") != std::string::npos);
  CHECK(r.out.find("478.87\n") != std::string::npos);
  CHECK(r.out.find("# Avg bus bandwidth") != std::string::npos);
}

TEST_CASE("collective: the count column follows nccl-tests' conventions per operation") {
  // 8 MiB of floats on 8 GPUs: all-gather prints the per-rank chunk, all-reduce the whole buffer.
  const auto ag = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_gather", "-b", "8M", "-e", "8M"});
  REQUIRE(ag.exit_code == 0);
  CHECK(ag.out.find("     8388608        262144     float") != std::string::npos);
  const auto ar = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "-b", "8M", "-e", "8M"});
  REQUIRE(ar.exit_code == 0);
  CHECK(ar.out.find("     8388608       2097152     float") != std::string::npos);
}

TEST_CASE("collective: --json rows with nccl-tests' bandwidth conventions") {
  const auto r = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "alltoall", "-g", "4", "-b", "1M", "-e",
                             "64M", "-f", "4", "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["op"] == "all_to_all");
  CHECK(j["gpus"] == 4);
  REQUIRE(j["rows"].size() == 4);  // 1M, 4M, 16M, 64M
  for (const auto& row : j["rows"]) {
    const double bytes = row["bytes"], t = row["time_us"], algbw = row["algbw_GBps"], busbw = row["busbw_GBps"];
    CHECK(algbw == doctest::Approx(bytes / (t * 1e-6) / 1e9));
    CHECK(busbw == doctest::Approx(algbw * 3.0 / 4.0));  // all-to-all: (n - 1) / n
  }
}

TEST_CASE("collective: --compare reads nccl-tests output and adds the error per size") {
  const auto r = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "--compare",
                             sample("all_reduce_perf.txt"), "--json"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto rows = nlohmann::json::parse(r.out)["rows"];
  REQUIRE(rows.size() == 6);  // the file's sizes, the NCCL log line and comments skipped
  CHECK(rows[0]["bytes"] == 1024.0);
  CHECK(rows[0]["measured_time_us"] == 30.12);
  CHECK(rows[5]["measured_busbw_GBps"] == 40.6);
  for (const auto& row : rows)
    CHECK(row["error"].get<double>() == doctest::Approx(row["time_us"].get<double>() / row["measured_time_us"].get<double>() - 1));
  const auto table = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "alltoall", "--compare",
                                 sample("alltoall_perf.txt")});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("measured     error") != std::string::npos);
  CHECK(table.out.find("29.00") != std::string::npos);
}

TEST_CASE("collective: bad input names the option, file or line, and exits 2") {
  const auto op = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "broadcast"});
  CHECK(op.exit_code == 2);
  CHECK(op.err.find("--op \"broadcast\": expected one of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv") !=
        std::string::npos);
  for (const char* size : {"0", "128G", "abc", "-4K"}) {
    CAPTURE(size);
    const auto r = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "-e", size});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("expected a size from 1 B to 64 GiB") != std::string::npos);
  }
  const auto gpus = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "-g", "9"});
  CHECK(gpus.exit_code == 2);
  CHECK(gpus.err.find("expected 2 to 8") != std::string::npos);
  const auto csv = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "--compare",
                               sample("not_nccl_tests.txt")});
  CHECK(csv.exit_code == 2);
  CHECK(csv.err.find("not_nccl_tests.txt: no nccl-tests result line") != std::string::npos);
  const auto line = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "--compare",
                                sample("bad_line.txt")});
  CHECK(line.exit_code == 2);
  CHECK(line.err.find("bad_line.txt:3: expected the out-of-place time in us (a number), got \"fast\"") != std::string::npos);
  const auto missing = run_moesim({"collective", "--cluster", "h100-sxm-8gpu", "--op", "all_reduce", "--compare",
                                   sample("no-such-file.txt")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no-such-file.txt: cannot read it") != std::string::npos);
}
