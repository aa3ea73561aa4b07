#include "gradmesh/elastic/launch_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <random>
#include <thread>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::elastic {
namespace {

constexpr int kMaxProcPerNode = 4096;
constexpr const char* kUsageLine = "usage: gradmesh launch [OPTIONS] -- COMMAND [ARGS...]";

// A strict decimal parse (core/parse_number.h): the whole text, no blanks.
bool parse_count(const std::string& text, int& out) {
  const std::optional<int64_t> value = try_parse_int(text, 0, 999'999'999);
  if (value) out = static_cast<int>(*value);
  return value.has_value();
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string not_found_hint(const std::string& name) {
  const bool script = name.size() > 3 && name.compare(name.size() - 3, 3, ".py") == 0;
  return script ? "; to run a Python script, name the interpreter: gradmesh launch ... -- python3 " + name
                : "; give a path or a program on PATH";
}

}  // namespace

NodeRange parse_nnodes(const std::string& text) {
  const size_t colon = text.find(':');
  int min_nodes = 0, max_nodes = 0;
  bool ok = false;
  if (colon == std::string::npos) {
    ok = parse_count(text, min_nodes);
    max_nodes = min_nodes;
  } else {
    ok = parse_count(text.substr(0, colon), min_nodes) && parse_count(text.substr(colon + 1), max_nodes);
  }
  if (!ok || min_nodes < 1)
    throw_error(ErrorKind::kUsage, "--nnodes",
                "expected a positive node count such as 2, or MIN:MAX such as 1:4, got '" + text + "'");
  if (min_nodes > max_nodes)
    throw_error(ErrorKind::kUsage, "--nnodes",
                "expected MIN:MAX with MIN <= MAX, got '" + text + "' (MIN " + std::to_string(min_nodes) +
                    " > MAX " + std::to_string(max_nodes) + ")");
  return NodeRange{min_nodes, max_nodes};
}

int parse_nproc_per_node(const std::string& text) {
  if (text == "auto" || text == "cpu") return std::max(1u, std::thread::hardware_concurrency());
  int count = 0;
  if (!parse_count(text, count) || count < 1 || count > kMaxProcPerNode)
    throw_error(ErrorKind::kUsage, "--nproc-per-node",
                "expected a worker count from 1 to " + std::to_string(kMaxProcPerNode) + " (or 'auto'), got '" +
                    text + "'");
  return count;
}

bool is_valid_run_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '-'; });
}

std::string fresh_run_id() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device() ^ static_cast<uint64_t>(::getpid()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(12, '0');
  for (char& c : id) c = kHex[rng() % 16];
  return id;
}

void validate_launch_options(const LaunchOptions& o) {
  if (o.command.empty())
    throw_error(ErrorKind::kUsage, "launch", std::string("no command to run; ") + kUsageLine);
  if (o.dashboard_port < -1 || o.dashboard_port > 65535)
    throw_error(ErrorKind::kUsage, "--dashboard-port",
                "expected 0 (a free port) to 65535, got " + std::to_string(o.dashboard_port));
  if (o.agent_port < -1 || o.agent_port > 65535)
    throw_error(ErrorKind::kUsage, "--agent-port", "expected 0 (a free port) to 65535, got " + std::to_string(o.agent_port));
  if (!o.token_file.empty() && o.agent_port < 0)
    throw_error(ErrorKind::kUsage, "--token-file", "protects the agent's endpoints; give --agent-port too");
  if (o.nnodes < 1) throw_error(ErrorKind::kUsage, "--nnodes", "expected at least 1, got " + std::to_string(o.nnodes));
  if (o.nproc_per_node < 1 || o.nproc_per_node > kMaxProcPerNode)
    throw_error(ErrorKind::kUsage, "--nproc-per-node",
                "expected 1 to " + std::to_string(kMaxProcPerNode) + ", got " + std::to_string(o.nproc_per_node));
  if (o.node_rank < -1 || o.node_rank >= o.nnodes)
    throw_error(ErrorKind::kUsage, "--node-rank",
                "expected 0 to " + std::to_string(o.nnodes - 1) + " (--nnodes " + std::to_string(o.nnodes) +
                    "), got " + std::to_string(o.node_rank));
  if (!o.rdzv_id.empty() && !is_valid_run_id(o.rdzv_id))
    throw_error(ErrorKind::kUsage, "--rdzv-id",
                "expected 1-128 characters from [A-Za-z0-9._-] not starting with '.', got '" + o.rdzv_id + "'");
  if (o.nnodes > 1 && o.rdzv_endpoint.empty())
    throw_error(ErrorKind::kUsage, "--rdzv-endpoint",
                "--nnodes " + std::to_string(o.nnodes) +
                    " needs a store every node reaches, e.g. --rdzv-endpoint redis://host:6379 "
                    "(or file:///shared/dir on one machine)");
  if (o.nnodes > 1 && o.rdzv_id.empty())
    throw_error(ErrorKind::kUsage, "--rdzv-id",
                "--nnodes " + std::to_string(o.nnodes) +
                    " needs the same --rdzv-id on every node so they find each other, e.g. --rdzv-id job42");
  if (!o.rdzv_endpoint.empty()) comm::parse_store_endpoint(o.rdzv_endpoint);  // throws kUsage
  if (o.master_port < 0 || o.master_port > 65535)
    throw_error(ErrorKind::kUsage, "--master-port", "expected 0 to 65535, got " + std::to_string(o.master_port));
  if (o.max_restarts < 0)
    throw_error(ErrorKind::kUsage, "--max-restarts", "expected 0 or more, got " + std::to_string(o.max_restarts));
  if (o.min_nnodes < 0 || o.min_nnodes > o.nnodes)
    throw_error(ErrorKind::kUsage, "--nnodes",
                "expected MIN:MAX with 1 <= MIN <= MAX, got " + std::to_string(o.min_nnodes) + ":" +
                    std::to_string(o.nnodes));
  if (o.min_nnodes > 0 && o.min_nnodes < o.nnodes && o.node_rank >= 0)
    throw_error(ErrorKind::kUsage, "--node-rank",
                "an elastic --nnodes " + std::to_string(o.min_nnodes) + ":" + std::to_string(o.nnodes) +
                    " assigns node ranks in join order each generation; drop --node-rank");
  if (!(o.heartbeat_timeout_s >= 0 && o.heartbeat_timeout_s <= kMaxHeartbeatTimeoutSeconds))
    throw_error(ErrorKind::kUsage, "--heartbeat-timeout",
                "expected seconds " + double_range_text(0, kMaxHeartbeatTimeoutSeconds) + " (0 = off), got " +
                    std::to_string(o.heartbeat_timeout_s));
  if (!(o.store_timeout_s >= kMinStoreTimeoutSeconds && o.store_timeout_s <= kMaxStoreTimeoutSeconds))
    throw_error(ErrorKind::kUsage, "--store-timeout",
                "expected seconds " + double_range_text(kMinStoreTimeoutSeconds, kMaxStoreTimeoutSeconds) +
                    ", got " + std::to_string(o.store_timeout_s));
  if (!(o.rdzv_last_call_s >= 0 && o.rdzv_last_call_s <= kMaxLastCallSeconds))
    throw_error(ErrorKind::kUsage, "--rdzv-last-call",
                "expected seconds " + double_range_text(0, kMaxLastCallSeconds) + ", got " +
                    std::to_string(o.rdzv_last_call_s));
  if (!(o.join_timeout_s >= kMinJoinTimeoutSeconds && o.join_timeout_s <= kMaxJoinTimeoutSeconds))
    throw_error(ErrorKind::kUsage, "--join-timeout",
                "expected seconds " + double_range_text(kMinJoinTimeoutSeconds, kMaxJoinTimeoutSeconds) + ", got " +
                    std::to_string(o.join_timeout_s));
  if (!(o.grace_period_s >= 0 && o.grace_period_s <= kMaxGracePeriodSeconds))
    throw_error(ErrorKind::kUsage, "--grace-period",
                "expected seconds " + double_range_text(0, kMaxGracePeriodSeconds) + ", got " +
                    std::to_string(o.grace_period_s));
}

std::string find_executable(const std::string& name) {
  if (name.empty()) throw_error(ErrorKind::kUsage, "launch", "the command is an empty string");
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    throw_error(ErrorKind::kUsage, "launch",
                "command '" + name + "' is not an executable file" + not_found_hint(name));
  }
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == begin ? "." : path.substr(begin, end - begin);  // empty entry = cwd, as execvp
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    begin = end + 1;
  }
  throw_error(ErrorKind::kUsage, "launch", "command '" + name + "' not found on PATH" + not_found_hint(name));
}

}  // namespace gradmesh::elastic
