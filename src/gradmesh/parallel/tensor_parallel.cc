#include "gradmesh/parallel/tensor_parallel.h"

#include <cstring>
#include <string>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"

namespace gradmesh::parallel {

using autograd::GradTarget;
using autograd::Variable;

namespace {

void add_or_copy(const GradTarget& t, const float* src, int64_t n) {
  if (t.accumulate)
    for (int64_t i = 0; i < n; ++i) t.data[i] += src[i];
  else
    std::memcpy(t.data, src, static_cast<size_t>(n) * sizeof(float));
}

// [..., n] -> [rows, n] and back: the linear op takes rows.
Variable rows_of(const Variable& x) {
  const Shape& s = x.shape();
  GRADMESH_CHECK(!s.empty(), "a tensor-parallel layer's input has no dimensions");
  return s.size() == 2 ? x : autograd::reshape(x, {x.value().numel() / s.back(), s.back()});
}

Variable with_last_dim(const Variable& y, const Shape& like, int64_t last) {
  if (like.size() == 2) return y;
  Shape s = like;
  s.back() = last;
  return autograd::reshape(y, s);
}

void check_input(const char* layer, const Variable& x, int64_t expected) {
  if (x.value().ndim() < 2 || x.shape().back() != expected)
    throw_error(ErrorKind::kShape, layer,
                "input " + shape_str(x.shape()) + " (expected [..., " + std::to_string(expected) + "])");
}

}  // namespace

Variable copy_to_tensor_parallel(const Variable& x, comm::ProcessGroup& group) {
  Variable result(x.value());  // the same values; only the backward differs
  if (!autograd::should_record({&x})) return result;
  auto xs = x.state(), ys = result.state();
  comm::ProcessGroup* g = &group;
  autograd::current_tape().record({xs}, ys, [xs, ys, g] {
    Tensor sum = ys->grad.clone();
    g->allreduce(sum)->wait_or_throw();
    add_or_copy(autograd::grad_target(*xs), sum.data(), sum.numel());
  });
  return result;
}

Variable reduce_from_tensor_parallel(const Variable& partial, const Variable& bias, comm::ProcessGroup& group) {
  const int64_t out = partial.shape().back();
  if (bias.defined() && (bias.value().ndim() != 1 || bias.shape()[0] != out))
    throw_error(ErrorKind::kShape, "reduce_from_tensor_parallel",
                "partial " + shape_str(partial.shape()) + ", bias " + shape_str(bias.shape()) +
                    " (expected bias [" + std::to_string(out) + "])");
  Tensor y = partial.value().clone();
  group.allreduce(y)->wait_or_throw();
  const int64_t rows = y.numel() / out;
  if (bias.defined()) {
    const float* b = bias.value().data();
    float* d = y.data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < out; ++c) d[r * out + c] += b[c];
  }
  Variable result(std::move(y));
  if (!autograd::should_record({&partial, &bias})) return result;
  auto ps = partial.state(), bs = bias.state(), ys = result.state();
  std::vector<std::shared_ptr<autograd::VariableState>> inputs{ps};
  if (bs) inputs.push_back(bs);
  autograd::current_tape().record(std::move(inputs), ys, [ps, bs, ys, rows, out] {
    const float* dy = ys->grad.data();
    if (ps->requires_grad) add_or_copy(autograd::grad_target(*ps), dy, rows * out);
    if (bs && bs->requires_grad) {
      // Column sums in double, in row order: the same bits on every rank of the group.
      std::vector<double> sums(static_cast<size_t>(out), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < out; ++c) sums[static_cast<size_t>(c)] += dy[r * out + c];
      GradTarget t = autograd::grad_target(*bs);
      for (int64_t c = 0; c < out; ++c)
        t.data[c] = static_cast<float>(sums[static_cast<size_t>(c)]) + (t.accumulate ? t.data[c] : 0.0f);
    }
  });
  return result;
}

std::pair<int64_t, int64_t> even_part(int64_t n, int parts, int index, const std::string& what) {
  if (parts < 1 || n % parts != 0)
    throw_error(ErrorKind::kConfig, what,
                std::to_string(n) + " does not split into " + std::to_string(parts) +
                    " equal parts for tensor parallelism (it must be a multiple of the tp degree)");
  const int64_t size = n / parts;
  return {index * size, (index + 1) * size};
}

namespace {

nn::InitSpec default_weight_init(nn::InitKind kind, int64_t in, int64_t out) { return {kind, in, out}; }
nn::InitSpec default_bias_init(nn::InitKind kind, int64_t in) {
  return {kind == nn::InitKind::kPytorchDefault ? nn::InitKind::kPytorchDefault : nn::InitKind::kZeros, in, 1};
}

nn::InitSpec sharded(nn::InitSpec spec, const std::shared_ptr<const nn::InitShard>& shard) {
  spec.shard = shard;
  return spec;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           std::shared_ptr<comm::ProcessGroup> group, bool bias, nn::InitKind init,
                                           int row_blocks)
    : in_(in_features), out_(out_features), group_(std::move(group)) {
  GRADMESH_CHECK(group_ != nullptr && row_blocks >= 1, "ColumnParallelLinear needs a group and row_blocks >= 1");
  const int tp = group_->size(), r = group_->rank();
  if (out_ % row_blocks != 0)
    throw_error(ErrorKind::kConfig, "ColumnParallelLinear",
                "out_features " + std::to_string(out_) + " is not " + std::to_string(row_blocks) + " equal blocks");
  const int64_t block = out_ / row_blocks;
  auto w = std::make_shared<nn::InitShard>();
  auto b = std::make_shared<nn::InitShard>();
  w->full_cols = w->cols = in_;
  for (int i = 0; i < row_blocks; ++i) {
    const auto [begin, end] = even_part(block, tp, r, "ColumnParallelLinear out_features");
    w->row_ranges.emplace_back(i * block + begin, i * block + end);
  }
  b->row_ranges = w->row_ranges;
  weight_shard_ = w;
  bias_shard_ = b;
  local_out_ = out_ / tp;
  weight_ = &add_parameter("weight", {local_out_, in_}, sharded(default_weight_init(init, in_, out_), w));
  bias_ = bias ? &add_parameter("bias", {local_out_}, sharded(default_bias_init(init, in_), b)) : nullptr;
}

void ColumnParallelLinear::set_init(const nn::InitSpec& weight, const nn::InitSpec& bias) {
  weight_->init = sharded(weight, weight_shard_);
  if (bias_) bias_->init = sharded(bias, bias_shard_);
}

Variable ColumnParallelLinear::forward(const Variable& x) {
  check_input("ColumnParallelLinear", x, in_);
  const Variable rows = rows_of(copy_to_tensor_parallel(x, *group_));
  const Variable y = autograd::linear(rows, weight_->var, bias_ ? bias_->var : Variable());
  return with_last_dim(y, x.shape(), local_out_);
}

std::string ColumnParallelLinear::describe() const {
  return "ColumnParallelLinear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         " (" + std::to_string(local_out_) + " on this rank of " + std::to_string(group_->size()) + "), bias=" +
         (bias_ ? "True" : "False") + ")";
}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features,
                                     std::shared_ptr<comm::ProcessGroup> group, bool bias, nn::InitKind init)
    : in_(in_features), out_(out_features), group_(std::move(group)) {
  GRADMESH_CHECK(group_ != nullptr, "RowParallelLinear needs a group");
  const auto [begin, end] = even_part(in_, group_->size(), group_->rank(), "RowParallelLinear in_features");
  local_in_ = end - begin;
  auto w = std::make_shared<nn::InitShard>();
  w->full_cols = in_;
  w->col_begin = begin;
  w->cols = local_in_;
  w->row_ranges = {{0, out_}};
  weight_shard_ = w;
  weight_ = &add_parameter("weight", {out_, local_in_}, sharded(default_weight_init(init, in_, out_), w));
  bias_ = bias ? &add_parameter("bias", {out_}, default_bias_init(init, in_)) : nullptr;
}

void RowParallelLinear::set_init(const nn::InitSpec& weight, const nn::InitSpec& bias) {
  weight_->init = sharded(weight, weight_shard_);
  if (bias_) bias_->init = bias;
}

Variable RowParallelLinear::forward(const Variable& x) {
  check_input("RowParallelLinear", x, local_in_);
  const Variable partial = autograd::linear(rows_of(x), weight_->var, Variable());
  const Variable y = reduce_from_tensor_parallel(partial, bias_ ? bias_->var : Variable(), *group_);
  return with_last_dim(y, x.shape(), out_);
}

std::string RowParallelLinear::describe() const {
  return "RowParallelLinear(in_features=" + std::to_string(in_) + " (" + std::to_string(local_in_) +
         " on this rank of " + std::to_string(group_->size()) + "), out_features=" + std::to_string(out_) +
         ", bias=" + (bias_ ? "True" : "False") + ")";
}

}  // namespace gradmesh::parallel
