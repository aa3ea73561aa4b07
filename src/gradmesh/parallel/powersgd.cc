#include "gradmesh/parallel/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/parallel/step_collectives.h"

namespace gradmesh::parallel {

void orthonormalize_columns(float* a, int64_t rows, int64_t cols) {
  // Gram-Schmidt with a second pass ("twice is enough"): one pass leaves a
  // column that was nearly dependent on the earlier ones with rounding noise
  // along them, which normalising would blow up to a unit vector that is not
  // orthogonal. A column left with (almost) nothing of its own becomes zero:
  // a gradient of rank below r (the sum of a few samples' gradients) then
  // gets fewer directions rather than noise ones. PyTorch's hook does one pass
  // and adds an epsilon instead.
  constexpr double kDependent = 1e-5;
  auto dot = [&](int64_t x, int64_t y) {
    double d = 0;
    for (int64_t i = 0; i < rows; ++i) d += static_cast<double>(a[i * cols + x]) * a[i * cols + y];
    return d;
  };
  for (int64_t j = 0; j < cols; ++j) {
    const double before = std::sqrt(dot(j, j));
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t k = 0; k < j; ++k) {
        const auto d = static_cast<float>(dot(k, j));
        for (int64_t i = 0; i < rows; ++i) a[i * cols + j] -= d * a[i * cols + k];
      }
    const double after = std::sqrt(dot(j, j));
    const float scale = after > kDependent * before && after > 0 ? static_cast<float>(1.0 / after) : 0.0f;
    for (int64_t i = 0; i < rows; ++i) a[i * cols + j] *= scale;
  }
}

PowerSgdCompressor::PowerSgdCompressor(const std::vector<nn::ParameterInfo>& params, PowerSgdOptions options)
    : options_(options) {
  if (options_.rank < 1)
    throw_error(ErrorKind::kConfig, "parallel.powersgd_rank", "expected at least 1, got " + std::to_string(options_.rank));
  const int64_t r = options_.rank;
  for (const nn::ParameterInfo& p : params) {
    // A matrix is [out, in] or a convolution's [out, in, kh, kw] seen as [out, in*kh*kw], as PyTorch's hook views it.
    const int64_t rows = p.shape.size() >= 2 ? p.shape[0] : 0;
    const int64_t cols = rows > 0 ? p.numel / rows : 0;
    const bool saves = rows > 0 && static_cast<double>(rows) * static_cast<double>(cols) >=
                                       options_.min_saving * static_cast<double>(r * (rows + cols));
    if (!saves) {
      exact_.emplace_back(p.offset, p.numel);
      rest_floats_ += p.numel;
      continue;
    }
    Matrix m;
    m.name = p.name;
    m.offset = p.offset;
    m.rows = rows;
    m.cols = cols;
    m.p_offset = p_floats_;
    m.q_offset = q_floats_;
    m.error = Tensor::zeros({rows, cols});
    p_floats_ += rows * r;
    q_floats_ += cols * r;
    largest_ = std::max(largest_, rows * cols);
    matrices_.push_back(std::move(m));
  }
  p_rest_ = Tensor::zeros({p_floats_ + rest_floats_ + 1});
  q_ = Tensor::zeros({std::max<int64_t>(q_floats_, 1)});
  scratch_ = Tensor::zeros({std::max<int64_t>(largest_, 1)});
  // From the start, not at the first compressed step: a checkpoint taken
  // before it must hold the Q that step will use, not zeros.
  initialize_q();
}

void PowerSgdCompressor::initialize_q() {
  float* q = q_.data();
  for (size_t i = 0; i < matrices_.size(); ++i) {
    const Matrix& m = matrices_[i];
    const CounterRng rng(options_.seed, RngPurpose::kPowerSgd, i);
    for (int64_t k = 0; k < m.cols * options_.rank; ++k) q[m.q_offset + k] = rng.normal(static_cast<uint64_t>(k));
  }
}

float PowerSgdCompressor::reduce(float* flat_grads, float verdict, comm::ProcessGroup& group,
                                 const std::optional<comm::Millis>& timeout) {
  const int64_t r = options_.rank;
  float* p = p_rest_.data();
  float* q = q_.data();
  spans_.clear();
  auto all_reduce = [&](Tensor& t, const char* what) {
    comm::AllreduceOptions o;
    o.op = comm::ReduceOp::kSum;
    o.timeout = timeout;
    PowerSgdSpan span{what, static_cast<int64_t>(t.nbytes()), now_seconds(), 0};
    wait_for_collective(*group.allreduce(t, o), timeout, std::string(what) + " was not reduced within the timeout");
    span.end_s = now_seconds();
    spans_.push_back(span);
  };
  // M = gradient + error, in place; P = M Q.
  for (Matrix& m : matrices_) {
    float* g = flat_grads + m.offset;
    const float* e = m.error.data();
    for (int64_t i = 0; i < m.rows * m.cols; ++i) g[i] += e[i];
    kernels::sgemm(false, false, m.rows, r, m.cols, 1.0f, g, m.cols, q + m.q_offset, r, 0.0f, p + m.p_offset, r);
  }
  float* rest = p + p_floats_;
  for (const auto& [offset, numel] : exact_) {
    std::memcpy(rest, flat_grads + offset, static_cast<size_t>(numel) * sizeof(float));
    rest += numel;
  }
  *rest = verdict;
  all_reduce(p_rest_, "PowerSGD P and exact gradients");
  rest = p + p_floats_;
  for (const auto& [offset, numel] : exact_) {
    std::memcpy(flat_grads + offset, rest, static_cast<size_t>(numel) * sizeof(float));
    rest += numel;
  }
  const float summed_verdict = *rest;
  // A gradient that is not finite with every loss finite (an overflow) shows
  // in the reduced P or exact part, the same on every rank: stop here, before
  // it reaches Q, which later steps would start from.
  for (int64_t i = 0; i < p_floats_ + rest_floats_; ++i)
    if (!std::isfinite(p[i])) return std::numeric_limits<float>::quiet_NaN();
  if (matrices_.empty()) return summed_verdict;
  // Q = M^T P on the orthonormal P.
  for (Matrix& m : matrices_) {
    orthonormalize_columns(p + m.p_offset, m.rows, r);
    kernels::sgemm(true, false, m.cols, r, m.rows, 1.0f, flat_grads + m.offset, m.cols, p + m.p_offset, r, 0.0f,
                  q + m.q_offset, r);
  }
  all_reduce(q_, "PowerSGD Q");
  const auto inverse_world = 1.0f / static_cast<float>(group.size());
  for (Matrix& m : matrices_) {
    float* approx = scratch_.data();
    kernels::sgemm(false, true, m.rows, m.cols, r, 1.0f, p + m.p_offset, r, q + m.q_offset, r, 0.0f, approx, m.cols);
    float* g = flat_grads + m.offset;
    float* e = m.error.data();
    for (int64_t i = 0; i < m.rows * m.cols; ++i) {
      e[i] = g[i] - approx[i] * inverse_world;
      g[i] = approx[i];
    }
  }
  return summed_verdict;
}

std::vector<std::pair<std::string, Tensor>> PowerSgdCompressor::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Matrix& m : matrices_) {
    out.emplace_back("error." + m.name, m.error);
    out.emplace_back("q." + m.name, q_.slice_flat(m.q_offset, {m.cols, options_.rank}));
  }
  return out;
}

void PowerSgdCompressor::load_state(const std::vector<std::pair<std::string, Tensor>>& named) {
  auto find = [&](const std::string& name, const Shape& shape) -> const Tensor& {
    for (const auto& [n, t] : named)
      if (n == name) {
        if (t.shape() != shape || t.dtype() != DType::kF32)
          throw_error(ErrorKind::kFormat, name, "expected float32 " + shape_str(shape) + ", got " +
                                                 (t.dtype() == DType::kF32 ? "float32 " : "another type, ") +
                                                 shape_str(t.shape()));
        return t;
      }
    throw_error(ErrorKind::kFormat, name, "missing from the PowerSGD state");
  };
  for (Matrix& m : matrices_) {
    const Tensor& e = find("error." + m.name, {m.rows, m.cols});
    std::memcpy(m.error.data(), e.data(), static_cast<size_t>(m.rows * m.cols) * sizeof(float));
    const Tensor& q = find("q." + m.name, {m.cols, options_.rank});
    std::memcpy(q_.data() + m.q_offset, q.data(), static_cast<size_t>(m.cols * options_.rank) * sizeof(float));
  }
}

}  // namespace gradmesh::parallel
