// Layer normalisation over the last dimension: y = (x - mean) / sqrt(var + eps) * gamma + beta.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

// x, y [rows, cols]; saves mean and rstd [rows] for the backward pass. gamma/beta may be null.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols, float eps,
                        float* y, float* mean, float* rstd);
// dx (+)=, dgamma (+)=, dbeta (+)=  (any of the three may be null when not needed).
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         int64_t rows, int64_t cols, float* dx, bool accumulate_dx, float* dgamma, float* dbeta,
                         bool accumulate_params);

}  // namespace gradmesh::kernels
