// `gradmesh plan`: before a launch, every way of laying a job out on N
// workers (data parallel, ZeRO 1-3, pipeline stages, tensor shards, meshes
// of them), what each rank would hold and how long a step would take.
//
// Memory is train/memory_budget.h's estimate for the layout (the rank that
// holds the most). Time per step on a rank:
//
//   compute  = measured seconds per sample (forward x 3, for forward and
//              backward, timed on this machine at one thread) x the rank's
//              samples / (pp x tp), stretched by the pipeline bubble
//              (1 + (pp - 1) / micro_batches)
//   dp       all-reduce of the rank's gradients over dp ranks (ring; ZeRO's
//            reduce-scatter + all-gather move the same bytes; stage 3 also
//            all-gathers the parameters in forward and backward: x 1.5 in
//            total), by the alpha-beta model (cost_model.h)
//   tp       four all-reduces of a block's activations per block (two in
//            forward, two in backward) over tp ranks
//   pp       each micro-batch's activations and their gradients across
//            every stage boundary
//
// with no overlap assumed (a bound from above: the reducer hides some of
// dp's communication behind backward; `gradmesh bench scaling` measures how
// much).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gradmesh/parallel/mesh.h"
#include "gradmesh/scaling/cost_model.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/memory_budget.h"

namespace gradmesh::scaling {

struct Layout {
  parallel::MeshShape mesh;
  int zero = 0;
  std::string name() const;  // "dp=4", "dp=2 zero=3", "dp=2 pp=2", "pp=2 tp=2"
};

// Every layout training can run on `workers` ranks for `config`'s model
// (meshes for the GPT only, with pp <= n_layer and tp dividing n_head; ZeRO
// stage 3 not with pipeline stages), or the variants of `only` when given.
std::vector<Layout> candidate_layouts(const train::Config& config, int workers,
                                      const std::optional<parallel::MeshShape>& only = std::nullopt);

struct LayoutCost {
  Layout layout;
  train::MemoryEstimate memory;
  bool fits = true;
  double compute_s = 0, dp_s = 0, tp_s = 0, pp_s = 0, step_s = 0, samples_per_s = 0;
};

struct PlanInputs {
  double seconds_per_sample = 0;  // forward + backward of one sample on one rank, whole model
  LinkCost link;
  std::optional<int64_t> memory_limit_bytes;
};

LayoutCost cost_layout(const train::Config& config, const train::InputGeometry& geometry, const Layout& layout,
                       const PlanInputs& inputs);

// The fastest layout that fits, or nullopt when none does.
std::optional<size_t> best_layout(const std::vector<LayoutCost>& costs);

}  // namespace gradmesh::scaling
