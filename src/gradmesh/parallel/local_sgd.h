// Local SGD and DiLoCo: ranks exchange parameters every H steps instead of
// gradients every step (Stich, "Local SGD Converges Fast and Communicates
// Little", 2019; Douillard et al., "DiLoCo: Distributed Low-Communication
// Training of Language Models", 2023).
//
// Between synchronisations each rank runs its own optimizer (the inner one)
// on its share of every global batch, with no communication. A
// synchronisation treats the ranks' mean parameter change since the last one
// as a gradient of the outer step:
//   delta   = outer - mean_r(params_r)
//   v       = mu * v + delta                    (outer_momentum mu)
//   outer  -= lr * (delta + mu * v)             (Nesterov; plain delta when mu = 0)
//   params_r = outer on every rank
// With outer_lr = 1 and no momentum that is parameter averaging (local SGD);
// DiLoCo's setting is 0.7 with Nesterov momentum 0.9. Each rank's inner
// optimizer state stays its own, as DiLoCo keeps it, except when the caller
// asks for it to be averaged too (before a checkpoint, so one state holds for
// every rank and a resumed run continues exactly as the original).
//
// Every rank applies the same arithmetic to the same all-reduced sum, so the
// parameters are bit-identical across ranks after every synchronisation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/optimizer.h"

namespace gradmesh::parallel {

struct LocalSgdOptions {
  int64_t local_steps = 1;    // H: optimizer steps between synchronisations
  float outer_lr = 1.0f;
  float outer_momentum = 0.0f;
  std::optional<comm::Millis> timeout;
};

class LocalSgd {
 public:
  // Takes the model's current parameters as the outer parameters: construct
  // it once every rank holds the same ones (after the broadcast or a resume).
  // REQUIRES: `model` and `group` outlive it; local_steps >= 1, outer_lr > 0,
  // 0 <= outer_momentum < 1 (Error(kConfig) otherwise).
  LocalSgd(nn::Model& model, std::shared_ptr<comm::ProcessGroup> group, LocalSgdOptions options);

  // True when `steps_done` optimizer steps end a local period.
  bool due(int64_t steps_done) const { return steps_done % options_.local_steps == 0; }
  // Collective: the outer step above; `average` (may be null): an inner
  // optimizer whose per-element state is averaged over the ranks as well.
  // Returns the seconds it took. Throws the all-reduce's failure (kComm/kTimeout).
  double synchronize(optim::Optimizer* average);
  // Bytes this rank sent into the last synchronisation's all-reduce.
  int64_t last_bytes() const { return last_bytes_; }

  // Takes the model's current parameters as the outer ones (a fresh start).
  void reset_outer();
  // The outer momentum ("outer_momentum", [numel]) for checkpoints; empty without momentum.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Restores state() and takes the model's current parameters as the outer
  // ones. Throws Error(kFormat) naming a missing or mis-shaped tensor.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& named);

 private:
  nn::Model& model_;
  std::shared_ptr<comm::ProcessGroup> group_;
  LocalSgdOptions options_;
  Tensor outer_;     // the parameters after the last synchronisation
  Tensor velocity_;  // outer momentum (empty without)
  Tensor wire_;      // the all-reduced buffer: parameter change, then optimizer state
  int64_t last_bytes_ = 0;
};

}  // namespace gradmesh::parallel
