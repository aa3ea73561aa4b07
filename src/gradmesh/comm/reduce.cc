#include "gradmesh/comm/reduce.h"

#include <algorithm>
#include <vector>

#include "gradmesh/core/bf16.h"

namespace gradmesh::comm {
namespace {

template <ReduceOp Op>
inline float apply(float a, float b) {
  if constexpr (Op == ReduceOp::kMax) return a > b ? a : b;
  else if constexpr (Op == ReduceOp::kMin) return a < b ? a : b;
  else return a + b;
}

template <ReduceOp Op>
void reduce_f32(const float* const* in, int k, float* out, int64_t count) {
  // Pairwise over inputs in rank order, vectorised over elements: the same
  // order on every rank, so every rank computes bit-identical results.
  const float* first = in[0];
  if (out != first) std::copy(first, first + count, out);
  for (int j = 1; j < k; ++j) {
    const float* __restrict src = in[j];
    for (int64_t i = 0; i < count; ++i) out[i] = apply<Op>(out[i], src[i]);
  }
  if constexpr (Op == ReduceOp::kAvg) {
    const float inv = 1.0f / static_cast<float>(k);
    for (int64_t i = 0; i < count; ++i) out[i] *= inv;
  }
}

template <ReduceOp Op>
void reduce_bf16(const uint16_t* const* in, int k, uint16_t* out, int64_t count) {
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t n = std::min(kBlock, count - base);
    for (int64_t i = 0; i < n; ++i) acc[i] = bf16_to_float(in[0][base + i]);
    for (int j = 1; j < k; ++j)
      for (int64_t i = 0; i < n; ++i) acc[i] = apply<Op>(acc[i], bf16_to_float(in[j][base + i]));
    if constexpr (Op == ReduceOp::kAvg)
      for (int64_t i = 0; i < n; ++i) acc[i] /= static_cast<float>(k);
    for (int64_t i = 0; i < n; ++i) out[base + i] = float_to_bf16(acc[i]);
  }
}

template <ReduceOp Op>
void dispatch(const void* const* inputs, int k, void* out, int64_t count, DType dtype) {
  if (dtype == DType::kF32)
    reduce_f32<Op>(reinterpret_cast<const float* const*>(inputs), k, static_cast<float*>(out), count);
  else
    reduce_bf16<Op>(reinterpret_cast<const uint16_t* const*>(inputs), k, static_cast<uint16_t*>(out), count);
}

}  // namespace

void reduce_buffers(const void* const* inputs, int k, void* out, int64_t count, DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return dispatch<ReduceOp::kSum>(inputs, k, out, count, dtype);
    case ReduceOp::kAvg: return dispatch<ReduceOp::kAvg>(inputs, k, out, count, dtype);
    case ReduceOp::kMax: return dispatch<ReduceOp::kMax>(inputs, k, out, count, dtype);
    case ReduceOp::kMin: return dispatch<ReduceOp::kMin>(inputs, k, out, count, dtype);
  }
}

void combine_into(float* acc, const void* in, int64_t count, DType dtype, ReduceOp op) {
  auto run = [&](auto apply_op) {
    if (dtype == DType::kF32) {
      const float* __restrict src = static_cast<const float*>(in);
      for (int64_t i = 0; i < count; ++i) acc[i] = apply_op(acc[i], src[i]);
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(in);
      for (int64_t i = 0; i < count; ++i) acc[i] = apply_op(acc[i], bf16_to_float(src[i]));
    }
  };
  switch (op) {
    case ReduceOp::kMax: return run([](float a, float b) { return a > b ? a : b; });
    case ReduceOp::kMin: return run([](float a, float b) { return a < b ? a : b; });
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return run([](float a, float b) { return a + b; });
  }
}

void divide_buffer(float* buf, int64_t count, float divisor) {
  for (int64_t i = 0; i < count; ++i) buf[i] /= divisor;
}

}  // namespace gradmesh::comm
