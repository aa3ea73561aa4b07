// Losses with their gradients, numerically stable.
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

// Softmax cross-entropy over rows of logits[rows, classes] with integer labels.
// Returns sum over rows of -log softmax(logits)[label] (in double for accuracy);
// stores softmax probabilities in `probs` [rows, classes] for the backward pass.
// Uses max-subtraction so large logits never overflow.
// REQUIRES: 0 <= labels[r] < classes (checked by the caller).
double softmax_xent_forward(const float* logits, const int32_t* labels, int64_t rows, int64_t classes, float* probs);
// dlogits (+)= scale * (probs - onehot(labels)); scale = dloss / denominator.
void softmax_xent_backward(const float* probs, const int32_t* labels, int64_t rows, int64_t classes, float scale,
                           float* dlogits, bool accumulate);

// Sum of squared differences (double accumulator).
double squared_error_sum(const float* pred, const float* target, int64_t n);
// dpred (+)= scale * 2 * (pred - target).
void squared_error_backward(const float* pred, const float* target, int64_t n, float scale, float* dpred,
                            bool accumulate);

// Index of the largest logit in each row (first on ties).
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out);

}  // namespace gradmesh::kernels
