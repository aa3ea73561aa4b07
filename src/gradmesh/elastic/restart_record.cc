#include "gradmesh/elastic/restart_record.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <type_traits>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::elastic {
namespace {

using Json = nlohmann::json;

std::string generation_key(const std::string& run_id) { return run_id + "/generation"; }
std::string recovery_key(const std::string& run_id) { return run_id + "/recovery"; }

template <typename T>
T field(const Json& j, const char* name, const std::string& key) {
  const auto it = j.find(name);
  const bool ok = it != j.end() && (std::is_same_v<T, std::string> ? it->is_string() : it->is_number_integer());
  if (!ok)
    throw_error(ErrorKind::kFormat, "store key '" + key + "'",
                std::string("restart record field '") + name + "' is missing or not " +
                    (std::is_same_v<T, std::string> ? "a string" : "an integer"));
  return it->get<T>();
}

}  // namespace

std::string restart_record_key(const std::string& run_id, int generation) {
  return run_id + "/restart/" + std::to_string(generation);
}

std::string restart_record_json(const RestartRecord& r) {
  return Json{{"generation", r.generation},         {"failed_rank", r.failed_rank},
              {"cause", r.cause},                   {"exit_code", r.exit_code},
              {"failure_unix_ms", r.failure_unix_ms}, {"last_step", r.last_step},
              {"failed_node", r.failed_node}}
      .dump();
}

RestartRecord parse_restart_record(const std::string& text, const std::string& key) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    throw_error(ErrorKind::kFormat, "store key '" + key + "'",
                std::string("the restart record is not valid JSON (") + e.what() + "): '" + text.substr(0, 200) + "'");
  }
  if (!j.is_object())
    throw_error(ErrorKind::kFormat, "store key '" + key + "'", "the restart record is not a JSON object: '" + text + "'");
  RestartRecord r;
  r.generation = field<int>(j, "generation", key);
  r.failed_rank = field<int>(j, "failed_rank", key);
  r.cause = field<std::string>(j, "cause", key);
  r.exit_code = field<int>(j, "exit_code", key);
  r.failure_unix_ms = field<int64_t>(j, "failure_unix_ms", key);
  r.last_step = field<int64_t>(j, "last_step", key);
  // Records of launchers that predate the field name no node.
  if (j.contains("failed_node")) r.failed_node = field<int>(j, "failed_node", key);
  return r;
}

std::optional<RestartRecord> read_restart_record(comm::Store& store, const std::string& run_id, int generation) {
  if (generation <= 0) return std::nullopt;
  const std::string key = restart_record_key(run_id, generation);
  if (!store.check({key})) return std::nullopt;
  return parse_restart_record(store.get(key, comm::Millis{5000}), key);
}

void announce_in_process_recovery(comm::Store& store, const std::string& run_id) {
  store.set(recovery_key(run_id), "in-process");
}

bool in_process_recovery_announced(comm::Store& store, const std::string& run_id) {
  const std::string key = recovery_key(run_id);
  return store.check({key}) && store.get(key, comm::Millis{5000}) == "in-process";
}

int read_current_generation(comm::Store& store, const std::string& run_id) {
  const std::string key = generation_key(run_id);
  if (!store.check({key})) {
    const std::string launched = env_string("GRADMESH_GENERATION");
    return static_cast<int>(parse_int(launched, "environment variable GRADMESH_GENERATION", 0, 1'000'000,
                                      ErrorKind::kUsage));
  }
  const std::string value = store.get(key, comm::Millis{5000});
  const std::optional<int64_t> g = try_parse_int(value, 0, 1'000'000);
  if (!g) throw_error(ErrorKind::kFormat, "store key '" + key + "'", "expected a generation number, got '" + value + "'");
  return static_cast<int>(*g);
}

void write_current_generation(comm::Store& store, const std::string& run_id, int generation) {
  store.set(generation_key(run_id), std::to_string(generation));
}

std::string surviving_ranks_key(const std::string& run_id, int generation) {
  return run_id + "/" + std::to_string(generation) + "/ranks";
}

void write_surviving_ranks(comm::Store& store, const std::string& run_id, int generation, const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ",") + std::to_string(r);
  store.compare_set(surviving_ranks_key(run_id, generation), "", text);  // every survivor computes the same list
}

std::optional<std::vector<int>> read_surviving_ranks(comm::Store& store, const std::string& run_id, int generation) {
  const std::string key = surviving_ranks_key(run_id, generation);
  if (!store.check({key})) return std::nullopt;
  const std::string text = store.get(key, std::chrono::milliseconds(1000));
  std::vector<int> ranks;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::optional<int64_t> r = try_parse_int(std::string_view(text).substr(start, comma - start), 0, 1'000'000);
    if (!r) throw_error(ErrorKind::kFormat, key, "expected comma-separated ranks, got '" + text + "'");
    ranks.push_back(static_cast<int>(*r));
    start = comma + 1;
  }
  return ranks;
}

}  // namespace gradmesh::elastic
