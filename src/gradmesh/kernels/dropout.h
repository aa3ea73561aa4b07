// Inverted dropout with a counter-based mask: element i of sample s is kept
// iff uniform(seed, kDropout, step_key, s * features + i) >= p, so the mask for
// a sample is the same whichever rank or thread processes it.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

// y = x * mask / (1 - p); mask[i] is 1 or 0 (kept for backward). first_sample is the
// global index of row 0, rows of `features` elements each.
void dropout_forward(const float* x, float* y, uint8_t* mask, int64_t rows, int64_t features, float p, uint64_t seed,
                     uint64_t step_key, int64_t first_sample);
// dx (+)= dy * mask / (1 - p)
void dropout_backward(const float* dy, const uint8_t* mask, int64_t n, float p, float* dx, bool accumulate);

}  // namespace gradmesh::kernels
