// PowerSGD: low-rank gradient compression with error feedback (Vogels et
// al., "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
// Optimization", 2019), the algorithm of PyTorch's powerSGD_hook.
//
// Each weight matrix's gradient M [n, m] (a convolution's [out, in*kh*kw])
// travels as two thin factors instead of n*m numbers:
//   M += error                       (what earlier steps' compression lost)
//   P = M Q            all-reduced   [n, r]   (with every uncompressed gradient)
//   P = orthonormal columns of P
//   Q = M^T P          all-reduced   [m, r]
//   approx = P Q^T                   the summed gradient, rank r
//   error = M - approx / world       on this rank
// Q is kept for the next step (warm start), so one power iteration per step
// tracks the gradient's leading subspace. Biases, norms and small matrices
// (where the factors would not save half the bytes) are summed exactly.
//
// The reduction is a sum, as in GradientReducer: every rank's loss is
// already divided by the global batch, so sum_r M_r is the batch's mean
// gradient and approx approximates it directly. The errors of all ranks
// add up to exactly what the step's approximation missed, which is what
// error feedback needs to be unbiased over steps.
//
// Every rank runs the same arithmetic on the same reduced buffers, so the
// approximations (and the weights) stay identical across ranks; Q starts from
// the counter RNG keyed by (seed, kPowerSgd, matrix), the same everywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/core/tensor.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::parallel {

struct PowerSgdOptions {
  int rank = 4;             // columns of P and Q
  uint64_t seed = 0;        // Q's initial values
  double min_saving = 2.0;  // compress a matrix only if n*m >= min_saving * r * (n + m)
};

// One reduction's collectives, for traces.
struct PowerSgdSpan {
  const char* what = "";
  int64_t bytes = 0;
  double start_s = 0, end_s = 0;
};

class PowerSgdCompressor {
 public:
  // `params`: the model's parameters in flat-buffer order.
  // REQUIRES: options.rank >= 1 (kConfig otherwise).
  PowerSgdCompressor(const std::vector<nn::ParameterInfo>& params, PowerSgdOptions options);

  // Replaces `flat_grads` (this rank's gradients) with the approximate sum over
  // `group`'s ranks, updating this rank's error and the shared Q. `verdict` is
  // summed exactly alongside (GradientReducer's non-finite loss flag) and
  // returned: NaN as well when the reduced factors or exact gradients are not
  // finite (the step must not be applied; Q is left as it was). Throws the
  // collectives' failures (kComm/kTimeout).
  float reduce(float* flat_grads, float verdict, comm::ProcessGroup& group, const std::optional<comm::Millis>& timeout);

  // Floats on the wire per reduction: P and the exact part (plus the verdict), then Q.
  int64_t wire_floats() const { return p_floats_ + rest_floats_ + 1 + q_floats_; }
  int64_t q_floats() const { return q_floats_; }
  // Weight matrices sent as factors (the rest are summed exactly).
  int compressed_matrices() const { return static_cast<int>(matrices_.size()); }
  const std::vector<PowerSgdSpan>& last_spans() const { return spans_; }

  // The state a checkpoint needs to continue bit-identically: this rank's
  // errors ("error.<param name>") and Q ("q.<param name>", the same on every rank).
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Restores what state() returned (copies). Throws Error(kFormat) naming
  // a missing or mis-shaped tensor.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& named);

 private:
  struct Matrix {
    std::string name;
    int64_t offset = 0, rows = 0, cols = 0;  // in the flat buffers; M is [rows, cols]
    int64_t p_offset = 0, q_offset = 0;      // in p_rest_ / q_
    Tensor error;                            // [rows, cols]
  };
  void initialize_q();

  PowerSgdOptions options_;
  std::vector<Matrix> matrices_;
  std::vector<std::pair<int64_t, int64_t>> exact_;  // {offset, numel} of the gradients summed exactly
  int64_t p_floats_ = 0, rest_floats_ = 0, q_floats_ = 0, largest_ = 0;
  Tensor p_rest_;  // [P of every matrix | exact gradients | verdict]
  Tensor q_;       // Q of every matrix, kept between steps
  Tensor scratch_; // the largest matrix's approximation
  std::vector<PowerSgdSpan> spans_;
};

// Orthonormalises the `cols` columns of the row-major [rows, cols] matrix in
// place (Gram-Schmidt, two passes); a column (nearly) in the span of the
// earlier ones becomes zero, so the nonzero columns are always orthonormal.
void orthonormalize_columns(float* a, int64_t rows, int64_t cols);

}  // namespace gradmesh::parallel
