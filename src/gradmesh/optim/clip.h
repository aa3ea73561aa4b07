// Global-norm gradient clipping over the flat gradient buffer
// (torch.nn.utils.clip_grad_norm_ with the L2 norm).
#pragma once

#include <cstdint>

namespace gradmesh::optim {

// The L2 norm of grads[0, count), accumulated in double. The sum is taken
// over fixed blocks of elements and the block sums are added in order, so
// the result is bit-identical for every compute-pool size.
double grad_norm(const float* grads, int64_t count);
// The square of grad_norm before the square root: partial sums that ranks
// holding disjoint shards (ZeRO) add up to the global squared norm.
double grad_sq_sum(const float* grads, int64_t count);

// Computes the global norm and, when it exceeds max_norm, scales every
// gradient by max_norm / (norm + 1e-6) (PyTorch's coefficient, clamped to 1,
// so a norm within 1e-6 below max_norm is also scaled very slightly, as in
// PyTorch). Returns the norm before clipping. A non-finite norm leaves the
// gradients untouched and is returned so the caller can skip the step.
// REQUIRES: max_norm finite and > 0 (else Error(kConfig)).
float clip_grad_norm(float* grads, int64_t count, float max_norm);

// The scaling half of clip_grad_norm for a buffer whose global norm `norm`
// was computed elsewhere (ZeRO: over every rank's shard): scales
// grads[0, count) by the same coefficient clip_grad_norm would use, or leaves
// them untouched when the norm is not finite or not above max_norm.
// REQUIRES: max_norm finite and > 0 (else Error(kConfig)).
void clip_to_norm(float* grads, int64_t count, double norm, float max_norm);

}  // namespace gradmesh::optim
