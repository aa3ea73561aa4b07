#include "gradmesh/elastic/rank_assignment.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>
#include <utility>
#include <thread>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::elastic {
namespace {

using Clock = std::chrono::steady_clock;
using comm::Millis;

// Between interrupt checks: short enough that Ctrl-C during a long join feels
// immediate, long enough that a 300 s join polls the store rarely.
constexpr Millis kPollSlice{200};

std::string owner_key(int node) { return "node/" + std::to_string(node) + "/owner"; }
std::string nproc_key(int node) { return "node/" + std::to_string(node) + "/nproc"; }

bool is_elastic(const RendezvousRequest& req) { return req.min_nnodes > 0 && req.min_nnodes < req.nnodes; }

// The node count the rendezvous closed with; nullopt while it is open.
std::optional<int> closed_count(comm::Store& store, const RendezvousRequest& req);

// "<host> pid <pid>" -> (host, pid); pid -1 when the label has another shape.
std::pair<std::string, int64_t> parse_label(const std::string& label) {
  const size_t at = label.rfind(" pid ");
  if (at == std::string::npos) return {label, -1};
  return {label.substr(0, at), try_parse_int(std::string_view(label).substr(at + 5), 1, 1 << 30).value_or(-1)};
}

// Whether process `pid` of this host runs: a killed process its parent has not
// reaped yet (a zombie) does not.
bool process_runs(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: kill's answer stands
  const size_t paren = line.rfind(')');  // the state follows the command name, which may hold spaces
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'Z';
}

// Whether the launcher that claimed `rank` as `owner` still runs: its process
// (when it ran on this host), else its keep-alive within kOwnerSilence.
bool owner_alive(comm::Store& store, int rank, const std::string& owner, const RendezvousRequest& req) {
  const auto [host, pid] = parse_label(owner);
  if (pid > 0 && host == parse_label(req.node_label).first) return process_runs(static_cast<pid_t>(pid));
  const std::string key = node_alive_key(rank);
  const auto read = [&] { return store.check({key}) ? store.get(key, Millis{1000}) : std::string(); };
  const std::string first = read();
  for (const Clock::time_point deadline = Clock::now() + kOwnerSilence; Clock::now() < deadline;) {
    if (req.check_interrupt) req.check_interrupt();
    std::this_thread::sleep_for(kPollSlice / 2);
    if (read() != first) return true;
  }
  return false;
}

bool all_nodes_joined(comm::Store& store, const RendezvousRequest& req) {
  std::vector<std::string> keys;
  for (int node = 0; node < req.nnodes; ++node) keys.push_back(nproc_key(node));
  return store.check(keys);
}

// An explicit rank already owned by `owner`: a live duplicate is refused; a
// dead predecessor's rank is taken over while the rendezvous is open, else
// (its generation runs without it) the node waits for the next one (-1).
int reclaim_node_rank(comm::Store& store, const RendezvousRequest& req, int rank, const std::string& owner) {
  if (owner_alive(store, rank, owner, req))
    throw_error(ErrorKind::kUsage, req.run_label,
                "node rank " + std::to_string(rank) + " is already taken by " + owner +
                    ", which is still running; this launcher is " + req.node_label +
                    ". Give each launcher a distinct --node-rank from 0 to " + std::to_string(req.nnodes - 1) +
                    ", or leave --node-rank out on every node so the store assigns ranks (do not mix the two). "
                    "A store left over from an earlier run with this id does the same: use a fresh --rdzv-id");
  if (all_nodes_joined(store, req)) {
    log_warn("node rank " + std::to_string(rank) + "'s previous launcher (" + owner +
             ") is gone and its generation runs without it; waiting for the other nodes to restart");
    return -1;
  }
  const std::string now_owner = store.compare_set(owner_key(rank), owner, req.node_label);
  if (now_owner != req.node_label)
    throw_error(ErrorKind::kUsage, req.run_label,
                "node rank " + std::to_string(rank) + " was just taken by " + now_owner + "; this launcher is " +
                    req.node_label);
  log_warn("node rank " + std::to_string(rank) + " taken over from its previous launcher (" + owner + "), which is gone");
  return rank;
}

// -1: too late for this generation (elastic, or an explicit rank whose dead
// owner's generation runs).
int claim_node_rank(comm::Store& store, const RendezvousRequest& req) {
  int rank = req.node_rank;
  if (rank < 0) {
    if (is_elastic(req) && closed_count(store, req)) return -1;
    const int64_t joined = store.add("node_counter", 1);
    if (is_elastic(req) && joined > req.nnodes) return -1;
    if (joined > req.nnodes) {
      // A node coming back after its launcher died takes the dead launcher's rank.
      for (int taken = 0; taken < req.nnodes; ++taken) {
        const std::string owner = store.check({owner_key(taken)}) ? store.get(owner_key(taken), Millis{1000}) : "";
        if (!owner.empty() && owner != req.node_label && !owner_alive(store, taken, owner, req))
          return reclaim_node_rank(store, req, taken, owner);
      }
      throw_error(ErrorKind::kUsage, req.run_label,
                  "this launcher is node number " + std::to_string(joined) + " to join, but --nnodes is " +
                      std::to_string(req.nnodes) +
                      " and every rank's launcher is running: more launchers were started than --nnodes, or the "
                      "store still holds an earlier run with this id; use a fresh --rdzv-id");
    }
    rank = static_cast<int>(joined - 1);
  }
  const std::string owner = store.compare_set(owner_key(rank), "", req.node_label);
  if (owner != req.node_label) return reclaim_node_rank(store, req, rank, owner);
  return rank;
}

[[noreturn]] void throw_join_timeout(comm::Store& store, const RendezvousRequest& req) {
  std::string missing, joined;
  int joined_count = 0;
  for (int node = 0; node < req.nnodes; ++node) {
    if (store.check({nproc_key(node)})) {
      ++joined_count;
      const std::string owner = store.check({owner_key(node)}) ? store.get(owner_key(node), Millis{1000}) : "?";
      joined += (joined.empty() ? "" : ", ") + std::string("node ") + std::to_string(node) + " = " + owner;
    } else {
      missing += (missing.empty() ? "" : ", ") + std::to_string(node);
    }
  }
  throw_error(ErrorKind::kTimeout, req.run_label,
              std::to_string(joined_count) + " of " + std::to_string(req.nnodes) + " nodes joined within " +
                  seconds_text(req.join_timeout) + "; missing node rank(s): " + missing +
                  " (joined: " + (joined.empty() ? "none" : joined) +
                  "). Start gradmesh launch with the same --nnodes, --rdzv-endpoint and --rdzv-id on the "
                  "missing node(s), or raise --join-timeout");
}

void wait_for_nodes(comm::Store& store, const RendezvousRequest& req, int node_rank) {
  std::vector<std::string> keys;
  for (int node = 0; node < req.nnodes; ++node) keys.push_back(nproc_key(node));
  const Clock::time_point deadline = Clock::now() + req.join_timeout;
  for (;;) {
    if (req.check_interrupt) req.check_interrupt();
    store.add(node_alive_key(node_rank), 1);
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    try {
      store.wait(keys, std::clamp(left, Millis{0}, kPollSlice));
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kTimeout) throw;
    }
    if (Clock::now() >= deadline) throw_join_timeout(store, req);
  }
}

int parse_positive(const std::string& text, const std::string& key, const std::string& run_label) {
  const std::optional<int64_t> value = try_parse_int(text, 1, 1'000'000);
  if (!value)
    throw_error(ErrorKind::kFormat, run_label,
                "store key '" + key + "' holds '" + text + "', expected a positive count (1 to 1000000)");
  return static_cast<int>(*value);
}

std::optional<int> closed_count(comm::Store& store, const RendezvousRequest& req) {
  if (!store.check({"closed"})) return std::nullopt;
  return parse_positive(store.get("closed", Millis{5000}), "closed", req.run_label);
}

// Elastic: waits until the rendezvous closes and returns its node count.
int wait_for_close(comm::Store& store, const RendezvousRequest& req, int node_rank) {
  const Clock::time_point deadline = Clock::now() + req.join_timeout;
  int64_t last_count = -1;
  Clock::time_point changed = Clock::now();
  for (;;) {
    if (req.check_interrupt) req.check_interrupt();
    store.add(node_alive_key(node_rank), 1);
    if (std::optional<int> closed = closed_count(store, req)) return *closed;
    const int64_t count = std::min<int64_t>(store.add("node_counter", 0), req.nnodes);
    const Clock::time_point now = Clock::now();
    if (count != last_count) last_count = count, changed = now;
    if (count >= req.nnodes || (count >= req.min_nnodes && now - changed >= req.last_call))
      return parse_positive(store.compare_set("closed", "", std::to_string(count)), "closed", req.run_label);
    if (now >= deadline)
      throw_error(ErrorKind::kTimeout, req.run_label,
                  std::to_string(count) + " node(s) joined within " + seconds_text(req.join_timeout) +
                      ", fewer than the " + std::to_string(req.min_nnodes) +
                      " that --nnodes " + std::to_string(req.min_nnodes) + ":" + std::to_string(req.nnodes) +
                      " needs; start more launchers with the same --rdzv-endpoint and --rdzv-id, or raise "
                      "--join-timeout");
    std::this_thread::sleep_for(std::min<Millis>(kPollSlice / 2, std::chrono::duration_cast<Millis>(req.last_call)));
  }
}

}  // namespace

RankAssignment join_rendezvous(comm::Store& store, const RendezvousRequest& req) {
  std::optional<RankAssignment> a = try_join_rendezvous(store, req);
  if (!a)
    throw_error(ErrorKind::kUsage, req.run_label,
                "this node arrived after the rendezvous closed; it can join at the next generation");
  return *a;
}

std::optional<RankAssignment> try_join_rendezvous(comm::Store& store, const RendezvousRequest& req) {
  GRADMESH_CHECK(req.nnodes >= 1 && req.nproc_per_node >= 1, "bad rendezvous request");
  GRADMESH_CHECK(!req.master_addr.empty(), "master address must be resolved before the rendezvous");
  RankAssignment out;
  out.local_world_size = req.nproc_per_node;
  store.set("begun", "1");
  out.node_rank = claim_node_rank(store, req);
  if (out.node_rank < 0) return std::nullopt;
  if (out.node_rank == 0) {
    const int port = req.master_port != 0 ? req.master_port : find_free_port();
    store.set("master", req.master_addr + ":" + std::to_string(port));
  }
  store.set(nproc_key(out.node_rank), std::to_string(req.nproc_per_node));
  RendezvousRequest members = req;
  if (is_elastic(req)) {
    members.nnodes = wait_for_close(store, req, out.node_rank);
    if (out.node_rank >= members.nnodes) return std::nullopt;  // joined just after the close
  }
  out.nnodes = members.nnodes;
  wait_for_nodes(store, members, out.node_rank);

  out.rank_base = out.world_size = 0;
  for (int node = 0; node < out.nnodes; ++node) {
    const int nproc = parse_positive(store.get(nproc_key(node), Millis{5000}), nproc_key(node), req.run_label);
    if (node < out.node_rank) out.rank_base += nproc;
    out.world_size += nproc;
  }
  // node 0 wrote "master" before its nproc key, so it exists by now.
  const std::string master = store.get("master", Millis{5000});
  const size_t colon = master.rfind(':');
  if (colon == std::string::npos || colon == 0)
    throw_error(ErrorKind::kFormat, req.run_label, "store key 'master' holds '" + master + "', expected ADDR:PORT");
  out.master_addr = master.substr(0, colon);
  out.master_port = parse_positive(master.substr(colon + 1), "master", req.run_label);
  return out;
}

bool republish_membership(comm::Store& store, const RendezvousRequest& req, const RankAssignment& joined) {
  if (store.check({nproc_key(joined.node_rank)})) return false;  // nothing lost (one round trip per call)
  log_warn("the store lost this node's rendezvous keys (restarted without persistence?); publishing them again");
  store.compare_set("begun", "", "1");
  store.compare_set(owner_key(joined.node_rank), "", req.node_label);
  if (joined.node_rank == 0)
    store.compare_set("master", "", joined.master_addr + ":" + std::to_string(joined.master_port));
  if (req.node_rank < 0) store.compare_set("node_counter", "", std::to_string(joined.nnodes));
  if (is_elastic(req)) store.compare_set("closed", "", std::to_string(joined.nnodes));
  store.compare_set(nproc_key(joined.node_rank), "", std::to_string(joined.local_world_size));
  return true;
}

std::string node_alive_key(int node) { return "alive/" + std::to_string(node); }

bool rendezvous_begun(comm::Store& agent_store) { return agent_store.check({"begun"}) || agent_store.check({"node_counter"}); }

int find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_error(ErrorKind::kIo, "find_free_port", std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    throw_error(ErrorKind::kIo, "find_free_port", std::string("bind to port 0: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace gradmesh::elastic
