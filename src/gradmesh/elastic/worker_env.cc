#include "gradmesh/elastic/worker_env.h"

#include <unordered_map>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/core/error.h"

extern char** environ;

namespace gradmesh::elastic {

EnvVars worker_variables(const RankAssignment& a, int local_rank, const RunIdentity& run) {
  GRADMESH_CHECK(local_rank >= 0 && local_rank < a.local_world_size, "local rank out of range");
  const std::string rank = std::to_string(a.global_rank(local_rank));
  const std::string world = std::to_string(a.world_size);
  // The store's password, if its endpoint carried one, goes in the
  // environment rather than in GRADMESH_STORE, which logs and tools show.
  const std::string store = comm::endpoint_without_password(run.store_endpoint);
  EnvVars vars = {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(a.local_world_size)},
      {"GROUP_RANK", std::to_string(a.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(a.nnodes)},
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"MASTER_ADDR", a.master_addr},
      {"MASTER_PORT", std::to_string(a.master_port)},
      {"TORCHELASTIC_RUN_ID", run.run_id},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(run.generation)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(run.max_restarts)},
      {"GRADMESH_STORE", store},
      {"GRADMESH_RUN_ID", run.run_id},
      {"GRADMESH_GENERATION", std::to_string(run.generation)},
      {"GRADMESH_REPLACEMENT", run.replacement ? "1" : "0"},
  };
  if (store != run.store_endpoint) {
    const comm::StoreEndpoint parsed = comm::parse_store_endpoint(run.store_endpoint);
    if (!parsed.password.empty()) vars.emplace_back(comm::password_variable(parsed.scheme), parsed.password);
  }
  return vars;
}

std::vector<std::string> merge_environment(const std::vector<std::string>& base, const EnvVars& vars) {
  std::unordered_map<std::string, const std::string*> replacement;
  for (const auto& [name, value] : vars) replacement[name] = &value;
  std::vector<std::string> out;
  out.reserve(base.size() + vars.size());
  for (const std::string& entry : base) {
    const std::string name = entry.substr(0, entry.find('='));
    if (replacement.count(name) == 0) out.push_back(entry);
  }
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) out.emplace_back(*entry);
  return out;
}

}  // namespace gradmesh::elastic
