#include "gradmesh/scaling/layout_plan.h"

#include <algorithm>
#include <cmath>

#include "gradmesh/core/error.h"

namespace gradmesh::scaling {

std::string Layout::name() const {
  std::string out;
  auto part = [&](const char* key, int v) {
    if (v > 1) out += (out.empty() ? "" : " ") + std::string(key) + "=" + std::to_string(v);
  };
  part("dp", mesh.dp);
  part("pp", mesh.pp);
  part("tp", mesh.tp);
  if (out.empty()) out = "one process";
  if (zero > 0) out += " zero=" + std::to_string(zero);
  return out;
}

std::vector<Layout> candidate_layouts(const train::Config& config, int workers,
                                      const std::optional<parallel::MeshShape>& only) {
  GRADMESH_CHECK(workers >= 1, "workers");
  const bool gpt = config.model.kind == "gpt";
  std::vector<parallel::MeshShape> meshes;
  if (only) {
    const parallel::MeshShape& m = *only;
    auto refuse = [&](const std::string& why) {
      throw_error(ErrorKind::kUsage, "--mesh dp=" + std::to_string(m.dp) + ",pp=" + std::to_string(m.pp) +
                                         ",tp=" + std::to_string(m.tp),
                  why);
    };
    if ((m.pp > 1 || m.tp > 1) && !gpt) refuse("only the GPT splits its layers (model.kind = \"" + config.model.kind + "\")");
    if (m.pp > config.model.n_layer)
      refuse(std::to_string(m.pp) + " stages need at least as many blocks, model.n_layer = " +
             std::to_string(config.model.n_layer));
    if (m.tp > 1 && config.model.n_head % m.tp != 0)
      refuse(std::to_string(config.model.n_head) + " heads do not divide among " + std::to_string(m.tp) + " shards");
    meshes.push_back(m);
  } else {
    for (int pp = 1; pp <= workers; ++pp) {
      if (workers % pp != 0 || (pp > 1 && (!gpt || pp > config.model.n_layer))) continue;
      for (int tp = 1; tp <= workers / pp; ++tp) {
        if ((workers / pp) % tp != 0 || (tp > 1 && (!gpt || config.model.n_head % tp != 0))) continue;
        meshes.push_back({workers / (pp * tp), pp, tp});
      }
    }
  }
  std::vector<Layout> out;
  for (const parallel::MeshShape& m : meshes) {
    out.push_back({m, 0});
    if (m.dp < 2) continue;  // ZeRO shards over the data-parallel ranks
    for (int z = 1; z <= 3; ++z)
      if (!(z == 3 && m.pp > 1)) out.push_back({m, z});
  }
  return out;
}

LayoutCost cost_layout(const train::Config& config, const train::InputGeometry& geometry, const Layout& layout,
                       const PlanInputs& in) {
  LayoutCost c;
  c.layout = layout;
  const parallel::MeshShape& m = layout.mesh;
  train::Config cfg = config;
  cfg.parallel.zero = layout.zero;
  cfg.parallel.mesh_dp = m.dp;
  cfg.parallel.mesh_pp = m.pp;
  cfg.parallel.mesh_tp = m.tp;
  c.memory = train::estimate_rank_memory(cfg, geometry, m);
  if (in.memory_limit_bytes) c.fits = c.memory.total_bytes() <= *in.memory_limit_bytes;

  const int64_t batch = config.train.batch_size;
  const double rows = static_cast<double>((batch + m.dp - 1) / m.dp);  // this replica's samples
  const int64_t micro = m.pp > 1 ? std::max<int64_t>(config.parallel.micro_batches, 1) : 1;
  const double bubble = 1.0 + static_cast<double>(m.pp - 1) / static_cast<double>(micro);
  c.compute_s = in.seconds_per_sample * rows / (m.pp * m.tp) * bubble;

  // The rank's parameters: the model's, split by stages and shards (as the estimate counts them).
  const double params = static_cast<double>(c.memory.state.params_bytes) / 4.0 * (layout.zero == 3 ? m.dp : 1);
  const double grad_bytes = params * (config.parallel.comm_dtype == "bf16" ? 2.0 : 4.0);
  c.dp_s = allreduce_seconds(Algorithm::kRing, grad_bytes, m.dp, in.link) * (layout.zero == 3 ? 1.5 : 1.0);
  if (config.model.kind == "gpt") {
    const double width = static_cast<double>(config.model.n_embd), tokens = static_cast<double>(config.model.block_size);
    const double activation = rows * tokens * width * 4.0;  // one replica's [rows, T, C] in float32
    const double blocks = static_cast<double>(config.model.n_layer) / m.pp;
    c.tp_s = 4.0 * blocks * allreduce_seconds(Algorithm::kRing, activation, m.tp, in.link);
    if (m.pp > 1) {
      const double per_micro = activation / static_cast<double>(micro);
      // Forward and backward across each of the pp - 1 boundaries, one message per micro-batch.
      c.pp_s = 2.0 * (m.pp - 1) * static_cast<double>(micro) *
               (in.link.alpha_s + per_micro * in.link.beta_s_per_byte);
    }
  }
  c.step_s = c.compute_s + c.dp_s + c.tp_s + c.pp_s;
  c.samples_per_s = static_cast<double>(batch) / c.step_s;
  return c;
}

std::optional<size_t> best_layout(const std::vector<LayoutCost>& costs) {
  std::optional<size_t> best;
  for (size_t i = 0; i < costs.size(); ++i)
    if (costs[i].fits && (!best || costs[i].samples_per_s > costs[*best].samples_per_s)) best = i;
  return best;
}

}  // namespace gradmesh::scaling
