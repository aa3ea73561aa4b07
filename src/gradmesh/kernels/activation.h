// Elementwise activations and the bias(+activation) epilogue fused after GEMMs.
//
// Backward functions write dx = dy * f'(.) when accumulate is false and add it
// when true, so a gradient buffer is never zero-filled just to be added to.
// ReLU and Tanh differentiate from their output (the input need not be kept);
// GELU needs its input.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

enum class Activation { kNone, kRelu, kGelu, kTanh };

const char* activation_name(Activation act);

// y[i] = f(x[i]); x and y may alias.
void activation_forward(Activation act, const float* x, float* y, int64_t n);
// dx = dy * f'(x) given x (input) and y (output) of the forward pass.
void activation_backward(Activation act, const float* x, const float* y, const float* dy, float* dx, int64_t n,
                         bool accumulate);

// y[r, c] = relu?(y[r, c] + bias[c]) for a [rows, cols] matrix (Linear's epilogue).
// act is kNone or kRelu.
void bias_rows_forward(float* y, const float* bias, int64_t rows, int64_t cols, Activation act);
// dy[i] = 0 where y[i] <= 0 (ReLU backward in place, from the output).
void relu_mask_inplace(float* dy, const float* y, int64_t n);

// out[c] (+)= sum over rows of x[r, c]  (bias gradient of a Linear).
void column_sums(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate);

// out[r] (+)= sum of row r of x [rows, cols] (bias gradient of a Conv2d from its [OC, N*OH*OW] gradient).
// Sums in 16 interleaved lanes so the loop vectorises; the order is fixed, so results are deterministic.
void row_sums(const float* x, int64_t rows, int64_t cols, float* out, bool accumulate);

// y (+)= x  /  y = alpha * y
void add_into(float* y, const float* x, int64_t n, bool accumulate);
// y = a + b (y may be a or b).
void add_sum(const float* a, const float* b, float* y, int64_t n);
void scale_inplace(float* y, float alpha, int64_t n);

}  // namespace gradmesh::kernels
