// moesim-calibrate started once per GPU by a launcher, on the fake device: several real processes on
// 127.0.0.1 with RANK/WORLD_SIZE (or Slurm's variables) set. Rank 0 writes one merged profile with
// inter-node collectives, the other ranks write nothing, the merged values follow the documented rule
// (median over the ranks), a slow GPU shows in the spread, and a rank that is killed, hangs or never
// starts makes every other rank stop within the timeout with a message naming it.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/cluster.hpp"
#include "calibrate/stats.hpp"
#include "common/stats.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

extern char** environ;

using moesim::testing::TempDir;
namespace fs = std::filesystem;
using Env = std::vector<std::pair<std::string, std::string>>;
using Clock = std::chrono::steady_clock;

namespace {

std::string calibrate_bin() {
  const char* env = std::getenv("MOESIM_CALIBRATE_BIN");
  return env ? env : MOESIM_CALIBRATE_BIN;
}
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A TCP port nobody listens on now (the kernel's choice for port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

bool launcher_variable(const std::string& name) {
  static const std::vector<std::string> exact = {"RANK",       "WORLD_SIZE", "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                                 "GROUP_RANK", "NODE_RANK",  "MASTER_ADDR", "MASTER_PORT"};
  return std::find(exact.begin(), exact.end(), name) != exact.end() || name.rfind("SLURM_", 0) == 0 ||
         name.rfind("OMPI_", 0) == 0 || name.rfind("PMI_", 0) == 0;
}

// One process of a launch: its output files and, once it ended, its exit code and end time.
struct Proc {
  pid_t pid = -1;
  fs::path out, err;
  int exit_code = -1;
  bool done = false;
  Clock::time_point ended;
  std::string out_text() const { return text(out); }
  std::string err_text() const { return text(err); }
  // "" until the child has created the file.
  static std::string text(const fs::path& path) { return fs::exists(path) ? moesim::testing::read_text(path) : ""; }
};

// Starts processes as a launcher would (each with its own variables and working folder) and never
// leaves one behind: whatever still runs at destruction is killed.
class Launch {
 public:
  ~Launch() {
    for (Proc& p : procs_)
      if (!p.done && p.pid > 0) {
        ::kill(p.pid, SIGKILL);
        ::waitpid(p.pid, nullptr, 0);
      }
  }
  Proc& start(const fs::path& dir, const std::string& name, const Env& vars, const std::vector<std::string>& args) {
    fs::create_directories(dir);
    Proc p;
    p.out = dir.parent_path() / (name + ".out");
    p.err = dir.parent_path() / (name + ".err");
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (!launcher_variable(kv.substr(0, kv.find('=')))) env.push_back(kv);
    }
    for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
    std::vector<std::string> argv{calibrate_bin()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int out = ::open(p.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(p.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int in = ::open("/dev/null", O_RDONLY);
      if (out < 0 || err < 0 || in < 0 || ::chdir(dir.c_str()) != 0) _exit(127);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      std::vector<char*> cargv, cenv;
      for (std::string& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      for (std::string& e : env) cenv.push_back(e.data());
      cenv.push_back(nullptr);
      ::execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    p.pid = pid;
    procs_.push_back(p);
    return procs_.back();
  }
  // Waits until every process ended or `seconds` passed; false (and a kill of the rest) on timeout.
  bool wait_all(double seconds) {
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (true) {
      bool all = true;
      for (Proc& p : procs_) {
        if (p.done) continue;
        int status = 0;
        if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
          p.done = true;
          p.ended = Clock::now();
          p.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        } else {
          all = false;
        }
      }
      if (all) return true;
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void kill(Proc& p) {
    ::kill(p.pid, SIGKILL);
    int status = 0;
    ::waitpid(p.pid, &status, 0);
    p.done = true;
    p.ended = Clock::now();
    p.exit_code = 128 + SIGKILL;
  }
  std::vector<Proc>& procs() { return procs_; }

 private:
  std::vector<Proc> procs_;
};

// A small quick plan: one architecture's shapes, bf16, three collective sizes.
std::vector<std::string> small_plan(std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--fake-device",
                                "--architectures",
                                "deepseek-v2-lite",
                                "--dtypes",
                                "bf16",
                                "-b",
                                "1K",
                                "-e",
                                "1M",
                                "-f",
                                "16",
                                "-o",
                                "p.yaml"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

Env env_rank(int rank, int world, int port, int ranks_per_node) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank % ranks_per_node)},
          {"GROUP_RANK", std::to_string(rank / ranks_per_node)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string dump_all(Launch& l) {
  std::string s;
  for (const Proc& p : l.procs()) s += "--- " + p.err.string() + "\n" + p.err_text();
  return s;
}

// The (op, ranks, scope) of every collective curve of a profile.
bool has_curve(const moesim::models::Profile& p, const std::string& op, int ranks, const std::string& scope) {
  for (const auto& c : p.collectives)
    if (moesim::models::collective_op_name(c.op) == op && c.ranks == ranks && c.scope == scope) return true;
  return false;
}

std::string record_key(const nlohmann::json& r) {
  return r.at("traffic").dump() + r.at("label").dump();
}

}  // namespace

TEST_CASE("cli calibrate cluster: launcher detection order, variables and bad input") {
  using moesim::calibrate::detect_launch;
  auto env_of = [](std::map<std::string, std::string> vars) {
    return [vars](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  };
  const std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "3"},
                                                    {"SLURM_NTASKS", "8"},
                                                    {"SLURM_LOCALID", "3"},
                                                    {"SLURM_NODEID", "0"},
                                                    {"SLURM_STEP_ID", "0"},
                                                    {"SLURM_JOB_ID", "4242"},
                                                    {"SLURM_STEP_NODELIST", "gpu[07-08,12],login1"}};
  const auto s = detect_launch(env_of(slurm), "auto");
  CHECK(s.launcher == "slurm");
  CHECK(s.rank == 3);
  CHECK(s.world == 8);
  CHECK(s.local_rank == 3);
  CHECK(s.master_addr == "gpu07");
  CHECK(contains(s.master_from, "SLURM_STEP_NODELIST"));
  CHECK(s.master_port == 29500 + 4242 % 1000);
  // RANK/WORLD_SIZE (torchrun inside an allocation) win over Slurm's; Open MPI's over Slurm's.
  auto both = slurm;
  both.insert({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "12345"}});
  const auto e = detect_launch(env_of(both), "auto");
  CHECK(e.launcher == "env");
  CHECK(e.rank == 1);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 12345);
  both["TORCHELASTIC_RUN_ID"] = "none";  // torchrun's agent holds MASTER_PORT
  CHECK(detect_launch(env_of(both), "auto").master_port == 12346);
  auto ompi = slurm;
  ompi.insert({{"OMPI_COMM_WORLD_RANK", "2"},
               {"OMPI_COMM_WORLD_SIZE", "4"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  const auto o = detect_launch(env_of(ompi), "auto");
  CHECK(o.launcher == "openmpi");
  CHECK(o.master_addr == "127.0.0.1");  // every rank on one node
  CHECK(o.master_port == 29500);
  // A batch script (no step id) is not a launch; --launcher slurm forces it.
  auto batch = slurm;
  batch.erase("SLURM_STEP_ID");
  CHECK(detect_launch(env_of(batch), "auto").launcher == "none");
  CHECK(detect_launch(env_of(batch), "slurm").world == 8);
  CHECK(detect_launch(env_of(both), "none").world == 1);
  batch.erase("SLURM_STEP_NODELIST");
  batch["SLURM_LAUNCH_NODE_IPADDR"] = "10.1.2.3";
  CHECK(detect_launch(env_of(batch), "slurm").master_addr == "10.1.2.3");

  CHECK(moesim::calibrate::first_slurm_host("node[001-004]") == "node001");
  CHECK(moesim::calibrate::first_slurm_host("a1,b[2-3]") == "a1");
  CHECK(moesim::calibrate::first_slurm_host("rack[3,5]-gpu") == "rack3-gpu");

  auto usage = [&](std::map<std::string, std::string> vars, const std::string& launcher = "auto") {
    return moesim::testing::error_of([&] { detect_launch(env_of(vars), launcher); });
  };
  CHECK(contains(usage({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE=0"));
  CHECK(
      contains(usage({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}), "RANK=4 is not below WORLD_SIZE=4"));
  CHECK(contains(usage({{"RANK", "x"}, {"WORLD_SIZE", "4"}}), "RANK: expected a non-negative integer"));
  CHECK(contains(usage({{"RANK", "0"}}), "WORLD_SIZE is not set"));
  CHECK(contains(usage({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), "MASTER_ADDR is not set"));
  CHECK(contains(usage({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                 "MASTER_PORT: expected a TCP port"));
  CHECK(contains(
      usage({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
      "mpirun -x MASTER_ADDR"));
  CHECK(contains(usage({}, "mpich"), "--launcher: expected one of"));
}

TEST_CASE("cli calibrate cluster: 4 ranks on 2 nodes write one merged profile, by the median rule") {
  TempDir tmp;
  const int port = free_port();
  Launch launch;
  for (int r = 0; r < 4; ++r)
    launch.start(tmp / ("rank" + std::to_string(r)), "rank" + std::to_string(r), env_rank(r, 4, port, 2),
                 small_plan({"--fake-slow-rank", "2=1.3", "--rendezvous-timeout", "60"}));
  REQUIRE_MESSAGE(launch.wait_all(240), dump_all(launch));
  for (const Proc& p : launch.procs()) CHECK_MESSAGE(p.exit_code == 0, p.err_text());

  // Only rank 0 writes, and only the profile and its raw JSON.
  CHECK(files_in(tmp / "rank0") == std::vector<std::string>{"p.raw.json", "p.yaml"});
  for (int r = 1; r < 4; ++r) CHECK(files_in(tmp / ("rank" + std::to_string(r))).empty());
  CHECK(contains(launch.procs()[1].out_text(), "rank 1 of 4"));

  const moesim::models::Profile p = moesim::models::load_profile((tmp / "rank0" / "p.yaml").string());
  CHECK(p.device.extra.at("gpus") == "4");
  CHECK(p.device.extra.at("nodes") == "2");
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})
    CHECK_MESSAGE(has_curve(p, op, 4, "inter_node"), op);
  CHECK(has_curve(p, "send_recv", 2, "intra_node"));  // rank 0 with rank 1, on its node
  CHECK(has_curve(p, "send_recv", 2, "inter_node"));  // rank 0 with rank 2, across nodes
  for (const auto& c : p.collectives)
    if (c.scope == "inter_node" && c.ranks == 4) {
      CHECK(c.provenance.kind == moesim::models::SourceKind::kMeasured);
      CHECK(contains(c.provenance.detail, "4 processes (one per GPU) on 2 nodes"));
    }

  const auto raw = nlohmann::json::parse(moesim::testing::read_text(tmp / "rank0" / "p.raw.json"));
  const nlohmann::json& cl = raw.at("cluster");
  CHECK(cl.at("world") == 4);
  CHECK(cl.at("nodes") == 2);
  REQUIRE(cl.at("ranks").size() == 4);
  // Merged collective = median over the ranks that took part of each rank's median; the ranks' host
  // timers differ, so the median is not rank 0's value.
  int checked = 0, differs_from_rank0 = 0;
  for (const nlohmann::json& merged : raw.at("collectives")) {
    std::vector<double> values;
    const bool send_recv = merged.at("traffic").at("op") == "send_recv";
    const int peer = send_recv ? merged.at("traffic").at("peer").get<int>() : -1;
    for (const nlohmann::json& rank : cl.at("ranks")) {
      const int r = rank.at("rank").get<int>();
      if (send_recv && r != 0 && r != peer) continue;
      for (const nlohmann::json& rec : rank.at("measurements").at("collectives"))
        if (record_key(rec) == record_key(merged)) values.push_back(rec.at("time").at("median_s").get<double>());
    }
    REQUIRE(values.size() == (send_recv ? 2u : 4u));
    const double median = moesim::common::percentile(values, 0.5);
    CHECK(merged.at("time").at("median_s").get<double>() == doctest::Approx(median).epsilon(1e-12));
    if (std::fabs(median / values.front() - 1.0) > 1e-4) ++differs_from_rank0;
    ++checked;
  }
  CHECK(checked == 21);  // 7 cases x 3 sizes
  CHECK(differs_from_rank0 > 0);
  // The slow GPU (rank 2) does not move the merged GEMMs; it shows in the spread.
  const auto& gemm0 = cl.at("ranks")[0].at("measurements").at("gemm");
  const auto& gemm2 = cl.at("ranks")[2].at("measurements").at("gemm");
  const auto& merged_gemm = raw.at("gemm");
  REQUIRE(merged_gemm.size() == gemm0.size());
  for (std::size_t i = 0; i < merged_gemm.size(); i += 17) {
    const double m = merged_gemm[i].at("time").at("median_s").get<double>();
    CHECK(m == doctest::Approx(gemm0[i].at("time").at("median_s").get<double>()).epsilon(1e-12));
    CHECK(gemm2[i].at("time").at("median_s").get<double>() == doctest::Approx(1.3 * m).epsilon(1e-9));
  }
  bool gemm_item = false;
  for (const nlohmann::json& item : cl.at("spread").at("items"))
    if (item.at("part") == "gemm") {
      gemm_item = true;
      CHECK(item.at("worst_rank") == 2);
      CHECK(item.at("worst_deviation").get<double>() == doctest::Approx(0.3).epsilon(1e-6));
    }
  CHECK(gemm_item);
  const std::string out = launch.procs()[0].out_text();
  CHECK(contains(out, "4 ranks on 2 nodes, launcher env"));
  CHECK(contains(out, "Per-GPU spread"));
  CHECK(contains(out, "  gemm "));
  CHECK(contains(out, "rank 2    +30.0%"));
  CHECK(contains(out, "# wrote p.yaml (base h200, merged over 4 ranks)"));
}

TEST_CASE("cli calibrate cluster: a Slurm step (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, node list)") {
  TempDir tmp;
  const int port = free_port();
  Launch launch;
  for (int r = 0; r < 3; ++r)
    launch.start(tmp / ("task" + std::to_string(r)), "task" + std::to_string(r),
                 {{"SLURM_PROCID", std::to_string(r)},
                  {"SLURM_NTASKS", "3"},
                  {"SLURM_LOCALID", std::to_string(r == 2 ? 0 : r)},
                  {"SLURM_NODEID", r == 2 ? "1" : "0"},
                  {"SLURM_STEP_ID", "0"},
                  {"SLURM_JOB_ID", "77"},
                  {"SLURM_STEP_NODELIST", "localhost"},
                  {"MASTER_PORT", std::to_string(port)}},
                 small_plan({"--rendezvous-timeout", "60"}));
  REQUIRE_MESSAGE(launch.wait_all(240), dump_all(launch));
  for (const Proc& p : launch.procs()) CHECK_MESSAGE(p.exit_code == 0, p.err_text());
  CHECK(files_in(tmp / "task0") == std::vector<std::string>{"p.raw.json", "p.yaml"});
  CHECK(files_in(tmp / "task1").empty());
  CHECK(files_in(tmp / "task2").empty());
  const std::string out = launch.procs()[0].out_text();
  CHECK(contains(out, "3 ranks on 2 nodes, launcher slurm"));
  CHECK(contains(out, "MASTER_ADDR localhost from SLURM_STEP_NODELIST"));
  const moesim::models::Profile p = moesim::models::load_profile((tmp / "task0" / "p.yaml").string());
  CHECK(has_curve(p, "all_to_all", 3, "inter_node"));
  CHECK(has_curve(p, "send_recv", 2, "inter_node"));
}

TEST_CASE("cli calibrate cluster: bad launcher variables and options exit 2 before anything is written") {
  TempDir tmp;
  auto run = [&](const Env& vars, std::vector<std::string> extra = {}) {
    Launch launch;
    Proc& p = launch.start(tmp / "w", "single", vars, small_plan(std::move(extra)));
    REQUIRE(launch.wait_all(60));
    CHECK(files_in(tmp / "w").empty());
    return std::make_pair(p.exit_code, p.err_text());
  };
  const auto zero = run({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  CHECK(zero.first == 2);
  CHECK(contains(zero.second, "WORLD_SIZE=0: expected at least 1 process"));
  const auto above = run({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}});
  CHECK(above.first == 2);
  CHECK(contains(above.second, "RANK=4 is not below WORLD_SIZE=4"));
  const auto no_addr = run({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  CHECK(no_addr.first == 2);
  CHECK(contains(no_addr.second, "MASTER_ADDR is not set"));
  const auto port = run({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "80a"}});
  CHECK(port.first == 2);
  CHECK(contains(port.second, "MASTER_PORT: expected a TCP port between 1 and 65535, got \"80a\""));
  const auto slurm = run({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "two"}, {"SLURM_STEP_ID", "0"}});
  CHECK(slurm.first == 2);
  CHECK(contains(slurm.second, "SLURM_NTASKS: expected a non-negative integer"));
  const auto gpus = run({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}}, {"--gpus", "2"});
  CHECK(gpus.first == 2);
  CHECK(contains(gpus.second, "each process drives one GPU"));
  const auto alone = run({}, {"--fake-slow-rank", "1=2"});
  CHECK(alone.first == 2);
  const auto timeout = run({}, {"--rendezvous-timeout", "0"});
  CHECK(timeout.first == 2);
}

TEST_CASE("cli calibrate cluster: a rank killed mid-run makes the others stop at once, naming it") {
  TempDir tmp;
  const int port = free_port();
  const double timeout = 30.0;
  Launch launch;
  for (int r = 0; r < 4; ++r)
    launch.start(tmp / ("rank" + std::to_string(r)), "rank" + std::to_string(r), env_rank(r, 4, port, 2),
                 small_plan({"--fake-stall-rank", "2", "--rendezvous-timeout", "30"}));
  Proc& victim = launch.procs()[2];
  // Kill rank 2 once it is inside a collective, as a GPU stuck in NCCL would be.
  const auto until = Clock::now() + std::chrono::seconds(120);
  while (!contains(victim.err_text(), "stalls in its first collective") && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_MESSAGE(contains(victim.err_text(), "stalls"), dump_all(launch));
  const auto killed = Clock::now();
  launch.kill(victim);
  REQUIRE_MESSAGE(launch.wait_all(timeout), dump_all(launch));
  for (int r : {0, 1, 3}) {
    const Proc& p = launch.procs()[static_cast<std::size_t>(r)];
    CAPTURE(r);
    CAPTURE(p.err_text());
    CHECK(p.exit_code == 1);
    CHECK(std::chrono::duration<double>(p.ended - killed).count() < 10.0);  // not the 30 s timeout
    CHECK(contains(p.err_text(), "rank 2 (host "));
    CHECK(contains(p.err_text(), "closed its connection"));
    CHECK(contains(p.err_text(), "start every rank again"));
    if (r != 0) CHECK(contains(p.err_text(), "stopped by rank 0"));
  }
  CHECK(files_in(tmp / "rank0").empty());
}

TEST_CASE("cli calibrate cluster: a hung rank stops every rank, itself included, after --rendezvous-timeout") {
  TempDir tmp;
  const int port = free_port();
  Launch launch;
  const auto started = Clock::now();
  for (int r = 0; r < 3; ++r)
    launch.start(tmp / ("rank" + std::to_string(r)), "rank" + std::to_string(r), env_rank(r, 3, port, 3),
                 small_plan({"--fake-stall-rank", "1", "--rendezvous-timeout", "2"}));
  REQUIRE_MESSAGE(launch.wait_all(60), dump_all(launch));
  for (const Proc& p : launch.procs()) {
    CAPTURE(p.err_text());
    CHECK(p.exit_code == 1);
    const double s = std::chrono::duration<double>(p.ended - started).count();
    CHECK(s >= 2.0);
    CHECK(s < 30.0);
  }
  CHECK(contains(launch.procs()[0].err_text(), "rank 1 (host "));
  CHECK(contains(launch.procs()[0].err_text(), "did not reach 'collective"));
  CHECK(contains(launch.procs()[0].err_text(), "within 2 s (--rendezvous-timeout)"));
  CHECK(contains(launch.procs()[1].err_text(), "did not finish within 2 s"));
  CHECK(contains(launch.procs()[2].err_text(), "stopped by rank 0"));
  CHECK(files_in(tmp / "rank0").empty());
}

TEST_CASE("cli calibrate cluster: a rank that never starts: rank 0 names it after the timeout, the others stop") {
  TempDir tmp;
  const int port = free_port();
  Launch launch;
  for (int r : {0, 1, 3})
    launch.start(tmp / ("rank" + std::to_string(r)), "rank" + std::to_string(r), env_rank(r, 4, port, 4),
                 small_plan({"--rendezvous-timeout", "2"}));
  REQUIRE_MESSAGE(launch.wait_all(60), dump_all(launch));
  for (const Proc& p : launch.procs()) {
    CAPTURE(p.err_text());
    CHECK(p.exit_code == 1);
    CHECK(contains(p.err_text(), "rank 2 did not connect to 127.0.0.1:" + std::to_string(port) + " within 2 s"));
  }
  CHECK(contains(launch.procs()[1].err_text(), "stopped by rank 0"));
}

TEST_CASE("cli calibrate cluster: an existing profile on rank 0 stops every rank with exit 2 and is kept") {
  TempDir tmp;
  const int port = free_port();
  fs::create_directories(tmp / "rank0");
  moesim::testing::write_text(tmp / "rank0" / "p.yaml", "mine\n");
  Launch launch;
  for (int r = 0; r < 2; ++r)
    launch.start(tmp / ("rank" + std::to_string(r)), "rank" + std::to_string(r), env_rank(r, 2, port, 2),
                 small_plan({"--rendezvous-timeout", "30"}));
  REQUIRE_MESSAGE(launch.wait_all(60), dump_all(launch));
  for (const Proc& p : launch.procs()) {
    CAPTURE(p.err_text());
    CHECK(p.exit_code == 2);
    CHECK(contains(p.err_text(), "--force"));
  }
  CHECK(moesim::testing::read_text(tmp / "rank0" / "p.yaml") == "mine\n");
  CHECK(files_in(tmp / "rank0") == std::vector<std::string>{"p.yaml"});
  CHECK(files_in(tmp / "rank1").empty());
}
