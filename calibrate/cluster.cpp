#include "calibrate/cluster.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/build_info.hpp"
#include "common/strings.hpp"

namespace moesim::calibrate {

using common::UsageError;
using Clock = std::chrono::steady_clock;

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::string first_slurm_host(std::string_view list) {
  std::string out;
  int depth = 0;
  bool in_range = false, range_done = false;
  for (char c : list) {
    if (c == ',' && depth == 0) break;
    if (c == '[') {
      ++depth;
      in_range = true;
      continue;
    }
    if (c == ']') {
      --depth;
      in_range = false;
      continue;
    }
    if (in_range) {
      // The first element of the bracket: digits up to '-' or ','.
      if (range_done) continue;
      if (c == '-' || c == ',') {
        range_done = true;
        continue;
      }
    }
    out += c;
  }
  return out;
}

namespace {

constexpr int kDefaultPort = 29500;  // torchrun's default MASTER_PORT

int parse_count(const std::string& name, const std::string& text, const std::string& launcher) {
  long long v = -1;
  const bool digits = !text.empty() && text.size() <= 9 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) v = std::stoll(text);
  if (!digits) {
    throw UsageError(name + ": expected a non-negative integer, got " + common::quoted(text) + " (read as " + launcher +
                     "'s variable; fix the launch command or the exported variable)");
  }
  return static_cast<int>(v);
}

int parse_port(const std::string& text, const std::string& from) {
  const bool digits = !text.empty() && text.size() <= 5 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const long v = digits ? std::stol(text) : -1;
  if (v < 1 || v > 65535)
    throw UsageError(from + ": expected a TCP port between 1 and 65535, got " + common::quoted(text) +
                     " (export MASTER_PORT=<a free port>, for example 29500)");
  return static_cast<int>(v);
}

}  // namespace

LaunchInfo detect_launch(const EnvLookup& env, std::string_view launcher) {
  static const std::vector<std::string> kLaunchers = {"auto", "env", "openmpi", "slurm", "none"};
  if (std::find(kLaunchers.begin(), kLaunchers.end(), launcher) == kLaunchers.end())
    throw UsageError("--launcher: expected one of auto, env, openmpi, slurm, none, got " + common::quoted(launcher) +
                     common::did_you_mean(launcher, kLaunchers));
  auto get = [&](const char* name) { return env(name); };
  std::string chosen(launcher);
  if (chosen == "auto") {
    if (get("RANK") || get("WORLD_SIZE"))
      chosen = "env";
    else if (get("OMPI_COMM_WORLD_RANK") || get("OMPI_COMM_WORLD_SIZE"))
      chosen = "openmpi";
    else if (get("SLURM_PROCID") && (get("SLURM_STEP_ID") || get("SLURM_STEPID")))
      chosen = "slurm";  // a task of an srun step (a batch script alone has no step id)
    else
      chosen = "none";
  }
  LaunchInfo info;
  info.launcher = chosen;
  if (chosen == "none") return info;

  auto required = [&](const char* name, const char* what) {
    std::optional<std::string> v = get(name);
    if (!v)
      throw UsageError(std::string(name) + " is not set: " + what + " (launcher " + chosen +
                       (launcher == "auto" ? ", detected from its other variables" : ", from --launcher") + ")");
    return parse_count(name, *v, chosen);
  };
  auto optional_count = [&](std::initializer_list<const char*> names, int fallback) {
    for (const char* n : names)
      if (std::optional<std::string> v = get(n)) return parse_count(n, *v, chosen);
    return fallback;
  };
  std::string rank_name, world_name;
  if (chosen == "env") {
    info.rank = required("RANK", "the global rank of this process");
    info.world = required("WORLD_SIZE", "the number of processes");
    info.local_rank = optional_count({"LOCAL_RANK"}, 0);
    rank_name = "RANK";
    world_name = "WORLD_SIZE";
    if (std::optional<std::string> g = get("GROUP_RANK"))
      info.node = "node " + *g;
    else if (std::optional<std::string> n = get("NODE_RANK"))
      info.node = "node " + *n;
  } else if (chosen == "openmpi") {
    info.rank = required("OMPI_COMM_WORLD_RANK", "the MPI rank of this process");
    info.world = required("OMPI_COMM_WORLD_SIZE", "the number of MPI processes");
    info.local_rank = optional_count({"OMPI_COMM_WORLD_LOCAL_RANK"}, 0);
    rank_name = "OMPI_COMM_WORLD_RANK";
    world_name = "OMPI_COMM_WORLD_SIZE";
  } else {
    info.rank = required("SLURM_PROCID", "the task's rank in the step");
    if (get("SLURM_STEP_NUM_TASKS")) {
      info.world = required("SLURM_STEP_NUM_TASKS", "the step's task count");
      world_name = "SLURM_STEP_NUM_TASKS";
    } else {
      info.world = required("SLURM_NTASKS", "the number of tasks");
      world_name = "SLURM_NTASKS";
    }
    info.local_rank = optional_count({"SLURM_LOCALID"}, 0);
    rank_name = "SLURM_PROCID";
    if (std::optional<std::string> n = get("SLURM_NODEID")) info.node = "node " + *n;
  }
  if (info.world < 1) throw UsageError(world_name + "=" + std::to_string(info.world) + ": expected at least 1 process");
  if (info.rank >= info.world)
    throw UsageError(rank_name + "=" + std::to_string(info.rank) + " is not below " + world_name + "=" +
                     std::to_string(info.world) + ": ranks are 0.." + std::to_string(info.world - 1));
  if (info.world == 1) return info;

  // Rank 0's address.
  if (std::optional<std::string> a = get("MASTER_ADDR"); a && !a->empty()) {
    info.master_addr = *a;
    info.master_from = "MASTER_ADDR";
  } else if (chosen == "openmpi") {
    const std::optional<std::string> local_size = get("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local_size && parse_count("OMPI_COMM_WORLD_LOCAL_SIZE", *local_size, chosen) == info.world) {
      info.master_addr = "127.0.0.1";
      info.master_from = "every rank on one node (OMPI_COMM_WORLD_LOCAL_SIZE = OMPI_COMM_WORLD_SIZE)";
    } else {
      throw UsageError(
          "MASTER_ADDR is not set: with ranks on several nodes, Open MPI gives no address for rank 0; "
          "pass it with mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<free port>");
    }
  } else if (chosen == "slurm") {
    for (const char* list : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
      if (std::optional<std::string> v = get(list); v && !v->empty()) {
        info.master_addr = first_slurm_host(*v);
        info.master_from = std::string(list) + " (its first host runs task 0 under srun's block distribution)";
        break;
      }
    if (info.master_addr.empty())
      if (std::optional<std::string> ip = get("SLURM_LAUNCH_NODE_IPADDR"); ip && !ip->empty()) {
        info.master_addr = *ip;
        info.master_from = "SLURM_LAUNCH_NODE_IPADDR";
      }
    if (info.master_addr.empty())
      throw UsageError(
          "MASTER_ADDR is not set and Slurm gave no node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST): "
          "export MASTER_ADDR=<host of task 0> before srun");
  } else {
    throw UsageError(
        "MASTER_ADDR is not set: the address of rank 0's node, which listens for the others "
        "(torchrun sets it; otherwise export MASTER_ADDR=<host of rank 0> MASTER_PORT=<free port>)");
  }
  if (std::optional<std::string> p = get("MASTER_PORT")) {
    info.master_port = parse_port(*p, "MASTER_PORT");
    // torchrun's agent on rank 0's node holds MASTER_PORT for its own store: take the next one.
    if (chosen == "env" && get("TORCHELASTIC_RUN_ID")) {
      if (info.master_port == 65535)
        throw UsageError("MASTER_PORT=65535 under torchrun: the next port, used here, does not exist");
      ++info.master_port;
      info.master_from += ", port MASTER_PORT + 1 (torchrun's store holds MASTER_PORT)";
    }
  } else if (chosen == "slurm" && get("SLURM_JOB_ID")) {
    const std::string job = *get("SLURM_JOB_ID");
    const bool digits =
        !job.empty() && std::all_of(job.begin(), job.end(), [](char c) { return c >= '0' && c <= '9'; });
    // Jobs sharing a node should not share a port: derive it from the job id.
    info.master_port =
        kDefaultPort +
        (digits ? static_cast<int>(std::stoull(job.substr(job.size() > 9 ? job.size() - 9 : 0)) % 1000) : 0);
  } else {
    info.master_port = kDefaultPort;
  }
  return info;
}

// ---- the TCP star ----

namespace {

enum MessageType : std::uint32_t { kHello = 1, kWelcome, kBarrier, kGo, kData, kAbort, kDone };
constexpr std::uint32_t kMagic = 0x4d43414c;  // "MCAL"
constexpr std::uint64_t kMaxPayload = 1ull << 32;

const char* type_name(std::uint32_t t) {
  switch (t) {
    case kHello:
      return "hello";
    case kWelcome:
      return "welcome";
    case kBarrier:
      return "barrier";
    case kGo:
      return "go";
    case kData:
      return "data";
    case kAbort:
      return "abort";
    case kDone:
      return "done";
    default:
      return "unknown";
  }
}

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

int poll_ms(Clock::time_point deadline) {
  const double left = seconds_left(deadline);
  return left <= 0 ? 0 : static_cast<int>(std::min(left * 1e3 + 1.0, 1000.0));
}

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// Writes all of `data` before `deadline`; false when the peer is gone or the time is up.
bool write_all(int fd, const char* data, std::size_t size, Clock::time_point deadline, bool wait) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait && seconds_left(deadline) > 0) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, poll_ms(deadline));
      continue;
    }
    return false;
  }
  return true;
}

std::string header(std::uint32_t type, std::uint64_t size) {
  std::string h(16, '\0');
  auto put = [&](std::size_t at, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) h[at + i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xff);
  };
  put(0, kMagic, 4);
  put(4, type, 4);
  put(8, size, 8);
  return h;
}

std::uint64_t get_be(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

enum class ReadStatus { kOk, kClosed, kTimeout, kError };
ReadStatus read_exact(int fd, std::string& out, std::size_t size, Clock::time_point deadline, int& err) {
  out.assign(size, '\0');
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::recv(fd, out.data() + done, size - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return ReadStatus::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      err = errno;
      return errno == ECONNRESET ? ReadStatus::kClosed : ReadStatus::kError;
    }
    if (seconds_left(deadline) <= 0) return ReadStatus::kTimeout;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, poll_ms(deadline));
  }
  return ReadStatus::kOk;
}

std::string abort_payload(int code, const std::string& message) {
  return nlohmann::json{{"exit_code", code}, {"message", message}}.dump();
}

std::string fix_hint() {
  return "fix or restart that rank, then start every rank again (srun, mpirun or torchrun starts them together)";
}

}  // namespace

struct Cluster::Message {
  std::uint32_t type = 0;
  std::string payload;
};

std::string Cluster::where(int r) const {
  if (r < 0 || r >= static_cast<int>(ranks_.size()) || ranks_[static_cast<std::size_t>(r)].host.empty())
    return "rank " + std::to_string(r);
  const RankInfo& i = ranks_[static_cast<std::size_t>(r)];
  return "rank " + std::to_string(r) + " (host " + i.host + ", pid " + std::to_string(i.pid) + ")";
}

void Cluster::send(int peer, int type, const std::string& payload) {
  const int fd = fds_[static_cast<std::size_t>(peer)];
  const std::string h = header(static_cast<std::uint32_t>(type), payload.size());
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
  if (!write_all(fd, h.data(), h.size(), deadline, true) ||
      !write_all(fd, payload.data(), payload.size(), deadline, true)) {
    // The peer may have said why before it closed: its abort is still readable.
    try {
      receive(peer, 0.5, "its last words");
    } catch (const ClusterError&) {
      if (abort_received_) throw;
    }
    throw ClusterError(where(rank_ == 0 ? peer : 0) + " could not be sent " +
                       type_name(static_cast<std::uint32_t>(type)) +
                       ": its connection is closed (it exited or was killed; its own output says why); " + fix_hint());
  }
}

Cluster::Message Cluster::receive(int peer, double seconds, const std::string& doing) {
  const int fd = fds_[static_cast<std::size_t>(peer)];
  const int who = rank_ == 0 ? peer : 0;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::string h;
  int err = 0;
  ReadStatus st = read_exact(fd, h, 16, deadline, err);
  Message m;
  if (st == ReadStatus::kOk) {
    if (get_be(h, 0, 4) != kMagic)
      throw ClusterError(where(who) + " sent something that is not moesim-calibrate's protocol");
    m.type = static_cast<std::uint32_t>(get_be(h, 4, 4));
    const std::uint64_t size = get_be(h, 8, 8);
    if (size > kMaxPayload) throw ClusterError(where(who) + " sent a message of " + std::to_string(size) + " bytes");
    st = read_exact(fd, m.payload, static_cast<std::size_t>(size), deadline, err);
  }
  std::ostringstream limit;
  limit << seconds;
  if (st == ReadStatus::kClosed)
    throw ClusterError(where(who) + " closed its connection while rank " + std::to_string(rank_) + " waited for " +
                       doing + ": it exited or was killed (its own output says why); " + fix_hint());
  if (st == ReadStatus::kTimeout)
    throw ClusterError(where(who) + " sent nothing for " + limit.str() + " s while rank " + std::to_string(rank_) +
                       " waited for " + doing +
                       ": it is hung, far slower than the others, or stopped (its own output says which). If the ranks "
                       "are only uneven, raise --rendezvous-timeout; otherwise " +
                       fix_hint());
  if (st == ReadStatus::kError)
    throw ClusterError("the connection to " + where(who) + " failed while waiting for " + doing + ": " +
                       errno_text(err));
  if (m.type == kAbort) {
    abort_received_ = true;
    int code = common::kExitRunFailure;
    std::string text = m.payload;
    try {
      const nlohmann::json j = nlohmann::json::parse(m.payload);
      code = j.at("exit_code").get<int>();
      text = j.at("message").get<std::string>();
    } catch (const std::exception&) {
    }
    if (rank_ == 0) throw ClusterError(where(who) + " failed: " + text, code);
    throw ClusterError("stopped by rank 0: " + text, code);
  }
  return m;
}

void Cluster::send_all(int type, const std::string& payload) {
  for (int r = 1; r < world(); ++r) send(r, type, payload);
}

std::vector<std::string> Cluster::collect(int type, const std::string& mine, const std::string& doing) {
  std::vector<std::string> out(static_cast<std::size_t>(world()));
  out[0] = mine;
  std::set<int> pending;
  for (int r = 1; r < world(); ++r) pending.insert(r);
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
  while (!pending.empty()) {
    std::vector<pollfd> polls;
    for (int r : pending) polls.push_back({fds_[static_cast<std::size_t>(r)], POLLIN, 0});
    if (seconds_left(deadline) <= 0) {
      std::ostringstream limit;
      limit << timeout_;
      std::string names;
      for (int r : pending) names += (names.empty() ? "" : ", ") + where(r);
      throw ClusterError(names + (pending.size() == 1 ? " did" : " did") + " not reach " + doing + " within " +
                         limit.str() +
                         " s (--rendezvous-timeout): hung, far slower than the others, or stopped (its own output says "
                         "which). If the ranks are only uneven, raise --rendezvous-timeout; otherwise " +
                         fix_hint());
    }
    ::poll(polls.data(), polls.size(), poll_ms(deadline));
    for (const pollfd& p : polls) {
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int r = static_cast<int>(std::find(fds_.begin(), fds_.end(), p.fd) - fds_.begin());
      Message m = receive(r, std::max(1.0, seconds_left(deadline)), doing);
      if (m.type != static_cast<std::uint32_t>(type))
        throw ClusterError(where(r) + " sent " + type_name(m.type) + " while rank 0 waited for " + doing +
                           ": the ranks run different plans (start every rank with the same options and build)");
      out[static_cast<std::size_t>(r)] = std::move(m.payload);
      pending.erase(r);
    }
  }
  return out;
}

std::unique_ptr<Cluster> Cluster::join(const LaunchInfo& launch, double timeout, const std::string& fingerprint) {
  std::unique_ptr<Cluster> c(new Cluster());
  c->rank_ = launch.rank;
  c->timeout_ = timeout;
  c->ranks_.resize(static_cast<std::size_t>(launch.world));
  RankInfo self{launch.rank, launch.local_rank, launch.node, this_host(), static_cast<long>(::getpid())};
  if (self.node.empty()) self.node = self.host;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  std::ostringstream limit;
  limit << timeout;
  const std::string at = launch.master_addr + ":" + std::to_string(launch.master_port);

  if (launch.rank == 0) {
    c->ranks_[0] = self;
    c->fds_.assign(static_cast<std::size_t>(launch.world), -1);
    // Listen on every interface: MASTER_ADDR may name this node by an address it does not bind
    // (a host name mapped to 127.0.1.1, a NAT), as torch's TCPStore does.
    int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = fd >= 0;
    if (!v6) fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw ClusterError("rank 0: cannot create a socket: " + errno_text(errno));
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = 0;
    if (v6) {
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(static_cast<std::uint16_t>(launch.master_port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(static_cast<std::uint16_t>(launch.master_port));
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    if (rc != 0 || ::listen(fd, launch.world + 8) != 0) {
      const int e = errno;
      ::close(fd);
      throw ClusterError("rank 0: cannot listen on port " + std::to_string(launch.master_port) + ": " + errno_text(e) +
                         (e == EADDRINUSE ? " (another program or job holds it: set MASTER_PORT to a free port)" : ""));
    }
    set_nonblocking(fd);
    int connected = 0;
    try {
      while (connected < launch.world - 1) {
        if (seconds_left(deadline) <= 0) {
          std::string missing;
          for (int r = 1; r < launch.world; ++r)
            if (c->fds_[static_cast<std::size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          throw ClusterError("rank 0: rank" + std::string(launch.world - 1 - connected > 1 ? "s " : " ") + missing +
                             " did not connect to " + at + " within " + limit.str() +
                             " s (--rendezvous-timeout): were they started, with the same MASTER_ADDR/MASTER_PORT (" +
                             launch.master_from + "), and can they reach this node on that port?");
        }
        pollfd p{fd, POLLIN, 0};
        ::poll(&p, 1, poll_ms(deadline));
        const int conn = ::accept(fd, nullptr, nullptr);
        if (conn < 0) continue;
        set_nonblocking(conn);
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        // Read the hello on a temporary slot; a stranger or a rank of another launch is refused.
        c->fds_.push_back(conn);
        const int slot = static_cast<int>(c->fds_.size()) - 1;
        Message hello;
        try {
          hello = c->receive(slot, std::max(1.0, std::min(10.0, seconds_left(deadline))), "its hello");
        } catch (const ClusterError&) {
          ::close(conn);
          c->fds_.pop_back();
          continue;  // not one of ours, or it went away: keep waiting for the real ranks
        }
        c->fds_.pop_back();
        RankInfo peer;
        std::string problem;
        int world = 0;
        std::string their_fingerprint;
        try {
          const nlohmann::json j = nlohmann::json::parse(hello.payload);
          peer = {j.at("rank").get<int>(), j.at("local_rank").get<int>(), j.at("node").get<std::string>(),
                  j.at("host").get<std::string>(), j.at("pid").get<long>()};
          world = j.at("world").get<int>();
          their_fingerprint = j.at("fingerprint").get<std::string>();
        } catch (const std::exception&) {
          problem = "a process that is not moesim-calibrate " + std::string(common::kVersion) + " connected to " + at;
        }
        const std::string who =
            "rank " + std::to_string(peer.rank) + " (host " + peer.host + ", pid " + std::to_string(peer.pid) + ")";
        if (problem.empty() && hello.type != kHello) problem = who + " did not introduce itself";
        if (problem.empty() && world != launch.world)
          problem = who + " was started with a world of " + std::to_string(world) + " processes, rank 0 with " +
                    std::to_string(launch.world) + ": they belong to different launches (is MASTER_PORT shared?)";
        if (problem.empty() && (peer.rank < 1 || peer.rank >= launch.world))
          problem = who + " has a rank outside 1.." + std::to_string(launch.world - 1);
        if (problem.empty() && c->fds_[static_cast<std::size_t>(peer.rank)] >= 0)
          problem = who + " connected, but " + c->where(peer.rank) + " already did: two processes have the same rank";
        if (problem.empty() && their_fingerprint != fingerprint)
          problem = who + " was started with other options than rank 0 (every rank must get the same command line)";
        if (!problem.empty()) {
          const std::string text = problem;
          write_all(conn, header(kAbort, abort_payload(common::kExitInputError, text).size()).data(), 16, deadline,
                    false);
          const std::string payload = abort_payload(common::kExitInputError, text);
          write_all(conn, payload.data(), payload.size(), deadline, false);
          ::close(conn);
          throw ClusterError(text, common::kExitInputError);
        }
        if (peer.node.empty()) peer.node = peer.host;
        c->fds_[static_cast<std::size_t>(peer.rank)] = conn;
        c->ranks_[static_cast<std::size_t>(peer.rank)] = peer;
        ++connected;
      }
    } catch (const ClusterError& e) {
      ::close(fd);
      c->abort(e.exit_code(), "rank 0 stopped the launch: " + std::string(e.what()));
      throw;
    }
    ::close(fd);
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankInfo& r : c->ranks_)
      ranks.push_back(
          {{"rank", r.rank}, {"local_rank", r.local_rank}, {"node", r.node}, {"host", r.host}, {"pid", r.pid}});
    c->send_all(kWelcome, ranks.dump());
    return c;
  }

  // Another rank: connect to rank 0, retrying while it is not listening yet.
  c->fds_.assign(1, -1);
  std::string last_error = "no attempt";
  while (c->fds_[0] < 0) {
    if (seconds_left(deadline) <= 0)
      throw ClusterError("rank " + std::to_string(launch.rank) + ": could not connect to rank 0 at " + at + " within " +
                         limit.str() + " s (--rendezvous-timeout; last error: " + last_error +
                         "). Is rank 0 running, is MASTER_ADDR (from " + launch.master_from +
                         ") rank 0's node, and is the port reachable and free? Set MASTER_ADDR/MASTER_PORT explicitly "
                         "if not.");
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai =
        ::getaddrinfo(launch.master_addr.c_str(), std::to_string(launch.master_port).c_str(), &hints, &found);
    if (gai != 0) {
      last_error = std::string("cannot resolve ") + common::quoted(launch.master_addr) + ": " + gai_strerror(gai);
    } else {
      for (addrinfo* a = found; a && c->fds_[0] < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        set_nonblocking(fd);
        int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          pollfd p{fd, POLLOUT, 0};
          ::poll(&p, 1, std::min(poll_ms(deadline), 1000));
          int soerr = 0;
          socklen_t len = sizeof soerr;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
          rc = (p.revents & POLLOUT) && soerr == 0 ? 0 : -1;
          errno = soerr != 0 ? soerr : ETIMEDOUT;
        }
        if (rc == 0) {
          const int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          c->fds_[0] = fd;
        } else {
          last_error = errno_text(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(found);
    }
    if (c->fds_[0] < 0) ::poll(nullptr, 0, 100);
  }
  const nlohmann::json hello = {{"rank", launch.rank},       {"world", launch.world}, {"local_rank", launch.local_rank},
                                {"node", self.node},         {"host", self.host},     {"pid", self.pid},
                                {"fingerprint", fingerprint}};
  c->ranks_[static_cast<std::size_t>(launch.rank)] = self;
  c->send(0, kHello, hello.dump());
  const Message welcome = c->receive(0, 2.0 * timeout, "the other ranks to connect to rank 0 (" + at + ")");
  if (welcome.type != kWelcome)
    throw ClusterError("rank 0 at " + at + " answered " + type_name(welcome.type) + " to this rank's hello");
  const nlohmann::json ranks = nlohmann::json::parse(welcome.payload);
  for (const nlohmann::json& r : ranks) {
    const int i = r.at("rank").get<int>();
    if (i < 0 || i >= launch.world) continue;
    c->ranks_[static_cast<std::size_t>(i)] = {i, r.at("local_rank").get<int>(), r.at("node").get<std::string>(),
                                              r.at("host").get<std::string>(), r.at("pid").get<long>()};
  }
  return c;
}

Cluster::~Cluster() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

std::vector<int> Cluster::node_of_rank() const {
  std::map<std::string, int> index;
  std::vector<int> out;
  for (const RankInfo& r : ranks_) {
    auto it = index.emplace(r.node, static_cast<int>(index.size())).first;
    out.push_back(it->second);
  }
  return out;
}

int Cluster::node_count() const {
  const std::vector<int> n = node_of_rank();
  return n.empty() ? 1 : *std::max_element(n.begin(), n.end()) + 1;
}

void Cluster::barrier(const std::string& label) {
  const std::string doing = "'" + label + "'";
  if (rank_ == 0) {
    const std::vector<std::string> labels = collect(kBarrier, label, doing);
    for (int r = 1; r < world(); ++r)
      if (labels[static_cast<std::size_t>(r)] != label)
        throw ClusterError(
            where(r) + " is at '" + labels[static_cast<std::size_t>(r)] + "' while rank 0 is at '" + label +
                "': the ranks run different plans (every rank needs the same options, build and GPU kind)",
            common::kExitInputError);
    send_all(kGo, "");
    return;
  }
  send(0, kBarrier, label);
  const Message m = receive(0, 2.0 * timeout_, "every rank to reach " + doing);
  if (m.type != kGo) throw ClusterError("rank 0 answered " + std::string(type_name(m.type)) + " at " + doing);
}

std::string Cluster::broadcast(const std::string& from_rank0) {
  if (rank_ == 0) {
    send_all(kData, from_rank0);
    return from_rank0;
  }
  const Message m = receive(0, 2.0 * timeout_, "data from rank 0 (an NCCL unique id)");
  if (m.type != kData) throw ClusterError("rank 0 sent " + std::string(type_name(m.type)) + " instead of data");
  return m.payload;
}

double Cluster::max(double value) {
  std::ostringstream s;
  s.precision(17);
  s << value;
  if (rank_ == 0) {
    double best = value;
    for (const std::string& v : collect(kData, s.str(), "a value every rank must agree on"))
      best = std::max(best, std::stod(v));
    std::ostringstream b;
    b.precision(17);
    b << best;
    send_all(kData, b.str());
    return best;
  }
  send(0, kData, s.str());
  const Message m = receive(0, 2.0 * timeout_, "the agreed value from rank 0");
  if (m.type != kData)
    throw ClusterError("rank 0 sent " + std::string(type_name(m.type)) + " instead of the agreed value");
  return std::stod(m.payload);
}

std::vector<std::string> Cluster::gather(const std::string& mine) {
  if (rank_ == 0) return collect(kData, mine, "every rank's measurements");
  send(0, kData, mine);
  return {};
}

void Cluster::finish() {
  if (rank_ == 0) {
    send_all(kDone, "");
    return;
  }
  const Message m = receive(0, 2.0 * timeout_, "rank 0 to merge the measurements and write the profile");
  if (m.type != kDone) throw ClusterError("rank 0 sent " + std::string(type_name(m.type)) + " instead of done");
}

void Cluster::abort(int exit_code, const std::string& message) noexcept {
  if (aborted_) return;
  aborted_ = true;
  try {
    const std::string payload = abort_payload(exit_code, message);
    const std::string h = header(kAbort, payload.size());
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
    for (int fd : fds_)
      if (fd >= 0 && write_all(fd, h.data(), h.size(), deadline, true))
        write_all(fd, payload.data(), payload.size(), deadline, true);
  } catch (...) {
  }
}

// ---- the step watchdog ----

StepWatchdog::StepWatchdog(double timeout, double grace, std::function<void(const std::string&)> on_expire,
                           std::function<void(const std::string&)> last_resort)
    : timeout_(timeout), grace_(grace), on_expire_(std::move(on_expire)), last_resort_(std::move(last_resort)) {
  thread_ = std::thread([this] { loop(); });
}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StepWatchdog::arm(const std::string& step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_ = step;
    armed_ = true;
    ++generation_;
  }
  cv_.notify_all();
}

void StepWatchdog::disarm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
    ++generation_;
  }
  cv_.notify_all();
}

bool StepWatchdog::expired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return expired_;
}

std::string StepWatchdog::expired_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return expired_step_;
}

void StepWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lock, [this] { return stop_ || armed_; });
      continue;
    }
    const unsigned long generation = generation_;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_));
    if (cv_.wait_until(lock, deadline, [&] { return stop_ || generation_ != generation; })) continue;
    expired_ = true;
    expired_step_ = step_;
    const std::string step = step_;
    lock.unlock();
    on_expire_(step);
    lock.lock();
    const auto last = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_));
    if (cv_.wait_until(lock, last, [&] { return stop_ || generation_ != generation; })) continue;
    lock.unlock();
    last_resort_(step);
    lock.lock();
    armed_ = false;
  }
}

}  // namespace moesim::calibrate
