#include "gradmesh/train/memory_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gradmesh/comm/environment.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/parallel/pipeline_schedule.h"

namespace gradmesh::train {
namespace {

constexpr double kFloatBytes = 4;
// cgroup v1 spells "no limit" as the largest page-aligned int64; anything this large is no limit.
constexpr int64_t kUnlimited = int64_t{1} << 62;

// Estimates saturate instead of overflowing: a config at the schema's bounds
// can describe more bytes than int64 holds, and any such number fails the check.
int64_t saturated(double bytes) {
  return bytes >= static_cast<double>(kInt64Max) ? kInt64Max : static_cast<int64_t>(bytes);
}

double mlp_floats_per_sample(const ModelConfig& c) {
  double floats = 2.0 * static_cast<double>(c.classes);
  for (int64_t h : c.hidden) floats += static_cast<double>(h) * (c.dropout > 0 ? 3.25 : 2.0);
  return floats;
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "max", empty or unreadable: no limit; else the number of bytes.
std::optional<int64_t> limit_value(const std::string& path) {
  std::string text = read_small_file(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const std::optional<int64_t> bytes = try_parse_int(text, 0, kInt64Max);
  if (!bytes || *bytes >= kUnlimited) return std::nullopt;
  return bytes;
}

// The tightest `file` limit of cgroup `path` and its ancestors under `root`.
void tightest_along(const std::string& root, std::string path, const std::string& file, const std::string& what,
                    std::optional<MemoryLimit>& best) {
  if (root.empty() || !std::filesystem::is_directory(root)) return;
  for (;;) {
    const std::string candidate = root + (path == "/" ? "" : path) + "/" + file;
    if (const std::optional<int64_t> bytes = limit_value(candidate); bytes && (!best || *bytes < best->bytes))
      best = MemoryLimit{*bytes, what + " (" + candidate + ")", true};
    if (path.empty() || path == "/") return;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

bool lists_memory(const std::string& controllers) {
  std::stringstream list(controllers);
  std::string name;
  while (std::getline(list, name, ','))
    if (name == "memory") return true;
  return false;
}

}  // namespace

std::string MemoryEstimate::describe() const {
  std::string split;
  if (mesh.pp > 1) split += "; pipeline stage " + std::to_string(pipeline_stage) + " of " + std::to_string(mesh.pp);
  if (mesh.tp > 1) split += "; tp " + std::to_string(mesh.tp);
  return "params " + parallel::mib_text(state.params_bytes) + " + grads " + parallel::mib_text(state.grads_bytes) +
         " + optimizer " + parallel::mib_text(state.optimizer_bytes) + " + activations " +
         (activation_bytes > 0 ? parallel::mib_text(activation_bytes) : std::string("(not estimated)")) + " = " +
         parallel::mib_text(total_bytes()) + " per rank (ZeRO stage " + std::to_string(stage) + ", " +
         std::to_string(world_size) + (world_size == 1 ? " rank" : " ranks") + split + ")";
}

int64_t gpt_activation_bytes(const nn::GptSpec& s, int64_t rows, int tensor_parallel) {
  const auto c = static_cast<double>(s.n_embd), h = static_cast<double>(s.n_head);
  const auto v = static_cast<double>(s.vocab_size), tp = static_cast<double>(std::max(tensor_parallel, 1));
  const int64_t block_end = s.stage.block_end < 0 ? s.n_layer : s.stage.block_end;
  const auto layers = static_cast<double>(block_end - s.stage.block_begin);
  const bool dropout = s.dropout > 0, first = s.stage.index == 0, last = s.stage.index == s.stage.count - 1;
  const double block = 6 * c + 4 + (12 * c + h) / tp + (dropout ? 2.5 * c : 0);
  const double head = (first ? 3 * c + (dropout ? 1.25 * c : 0) : 0) + (last ? c + 2 + 2 * v / tp : 0);
  const double kept = s.recompute ? (layers + 1) * c + block : layers * block;
  return saturated(kFloatBytes * static_cast<double>(rows) * static_cast<double>(s.block_size) * (kept + head));
}

int64_t micro_batch_rows(const TrainConfig& train, int world_size) {
  const int64_t per_rank = (train.batch_size + world_size - 1) / world_size;
  return (per_rank + train.accum_steps - 1) / train.accum_steps;
}

MemoryEstimate estimate_rank_memory(const Config& config, const InputGeometry& geometry, int64_t num_params,
                                    int world_size) {
  MemoryEstimate e;
  e.world_size = world_size;
  e.stage = world_size > 1 ? static_cast<int>(config.parallel.zero) : 0;
  e.state = parallel::zero_memory_per_rank(
      e.stage, num_params, world_size, parallel::optimizer_state_per_param(config.optim.name, config.optim.momentum));
  const int64_t rows = micro_batch_rows(config.train, world_size);
  if (config.model.kind == "gpt")
    e.activation_bytes = gpt_activation_bytes(gpt_spec(config.model, geometry), rows);
  else if (config.model.kind == "mlp")
    e.activation_bytes = saturated(kFloatBytes * static_cast<double>(rows) * mlp_floats_per_sample(config.model));
  return e;
}

MemoryEstimate estimate_rank_memory(const Config& config, const InputGeometry& geometry,
                                    const parallel::MeshShape& mesh) {
  const bool split = mesh.pp > 1 || mesh.tp > 1;
  if (!split || config.model.kind != "gpt") {
    MemoryEstimate e = estimate_rank_memory(config, geometry, count_parameters(config.model, geometry), mesh.dp);
    e.mesh = mesh;
    return e;
  }
  const std::vector<parallel::StageBlocks> stages =
      mesh.pp > 1 ? gpt_stage_split(config.model, geometry, mesh.pp) : std::vector<parallel::StageBlocks>{{0, -1}};
  const parallel::PipelineSchedule schedule =
      parallel::parse_pipeline_schedule(config.parallel.pipeline_schedule, "parallel.pipeline_schedule");
  const int micro = mesh.pp > 1 ? static_cast<int>(config.parallel.micro_batches) : 1;
  MemoryEstimate best;
  for (int stage = 0; stage < static_cast<int>(stages.size()); ++stage) {
    nn::GptSpec spec = gpt_spec(config.model, geometry);
    spec.stage = nn::GptStage{stage, mesh.pp, stages[static_cast<size_t>(stage)].begin,
                              stages[static_cast<size_t>(stage)].end};
    MemoryEstimate e = estimate_rank_memory(config, geometry, nn::gpt_parameter_count(spec, mesh.tp), mesh.dp);
    if (mesh.pp > 1) {
      const int64_t per_rank = (config.train.batch_size + mesh.dp - 1) / mesh.dp;
      const int64_t rows = (per_rank + micro - 1) / micro;
      const int in_flight = parallel::peak_in_flight(parallel::stage_schedule(schedule, stage, mesh.pp, micro));
      e.activation_bytes = in_flight * gpt_activation_bytes(spec, rows, mesh.tp);
    } else {
      e.activation_bytes = gpt_activation_bytes(spec, micro_batch_rows(config.train, mesh.dp), mesh.tp);
    }
    e.mesh = mesh;
    e.pipeline_stage = stage;
    if (stage == 0 || e.total_bytes() > best.total_bytes()) best = e;
  }
  return best;
}

std::optional<MemoryLimit> cgroup_memory_limit(const std::string& proc_self_cgroup, const CgroupMounts& mounts) {
  std::optional<MemoryLimit> best;
  std::stringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; cgroup v2 is "0::path".
    const size_t first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') continue;
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      for (const std::string& root : mounts.v2_roots) tightest_along(root, path, "memory.max", "cgroup memory.max", best);
    } else if (lists_memory(controllers)) {
      tightest_along(mounts.v1_memory_root, path, "memory.limit_in_bytes", "cgroup v1 memory.limit_in_bytes", best);
    }
  }
  return best;
}

std::optional<MemoryLimit> process_memory_limit() {
  std::optional<MemoryLimit> best = cgroup_memory_limit(read_small_file("/proc/self/cgroup"));
  struct rlimit as {};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
      as.rlim_cur < static_cast<rlim_t>(kUnlimited)) {
    const auto bytes = static_cast<int64_t>(as.rlim_cur);
    if (!best || bytes < best->bytes) best = MemoryLimit{bytes, "RLIMIT_AS (ulimit -v, prlimit --as)", false};
  }
  return best;
}

void check_memory_fits(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit, int local_ranks) {
  if (!limit) return;
  const int sharing = limit->shared ? std::max(local_ranks, 1) : 1;
  const double needed = static_cast<double>(estimate.total_bytes()) * sharing;
  if (needed <= static_cast<double>(limit->bytes)) return;
  std::string what = "the estimated memory of this rank, " + estimate.describe() + ",";
  if (sharing > 1)
    what += " times the " + std::to_string(sharing) + " ranks of this node that share the limit (" +
            parallel::mib_text(saturated(needed)) + "),";
  std::string hint = estimate.stage < 3 ? "shard the training state with parallel.zero = " +
                                              std::string(estimate.stage < 1   ? "1, 2 or 3"
                                                          : estimate.stage < 2 ? "2 or 3"
                                                                               : "3") +
                                              " over several processes"
                                        : "spread it over more processes";
  hint += " (--nproc-per-node, more nodes), set model.recompute = true (GPT) or lower train.batch_size, use a "
          "smaller model, or raise the limit";
  throw_error(ErrorKind::kConfig, "memory",
              what + " exceeds the memory limit of " + parallel::mib_text(limit->bytes) + " from " + limit->source +
                  "; " + hint);
}

int local_rank_count() {
  return comm::launched_as_worker() ? comm::read_worker_environment().local_world_size : 1;
}

std::string memory_message(const MemoryEstimate& estimate, const std::optional<MemoryLimit>& limit) {
  return "memory (estimate): " + estimate.describe() +
         (limit ? "; limit " + parallel::mib_text(limit->bytes) + " from " + limit->source : "");
}

obs::JsonObject memory_metrics(const MemoryEstimate& m, const std::optional<MemoryLimit>& limit) {
  obs::JsonObject line;
  line.add("type", "memory").add("estimate_bytes", m.total_bytes()).add("params_bytes", m.state.params_bytes)
      .add("grads_bytes", m.state.grads_bytes).add("optimizer_bytes", m.state.optimizer_bytes)
      .add("activation_bytes", m.activation_bytes).add("zero_stage", m.stage).add("world_size", m.world_size);
  if (limit) line.add("limit_bytes", limit->bytes).add("limit_source", limit->source);
  return line;
}

}  // namespace gradmesh::train
