#include "gradmesh/parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>

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

std::pair<int64_t, int64_t> balanced_part(int64_t n, int parts, int index) {
  GRADMESH_CHECK(parts >= 1 && index >= 0 && index < parts, "balanced_part outside its parts");
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

namespace {


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
  w->full_shape = {out_, in_};
  b->full_shape = {out_};
  w->full_cols = w->cols = in_;
  local_out_ = 0;
  for (int i = 0; i < row_blocks; ++i) {
    const auto [begin, end] = row_blocks == 1 ? balanced_part(block, tp, r)
                                              : even_part(block, tp, r, "ColumnParallelLinear out_features");
    w->row_ranges.emplace_back(i * block + begin, i * block + end);
    local_out_ += end - begin;
  }
  if (local_out_ == 0)
    throw_error(ErrorKind::kConfig, "ColumnParallelLinear",
                std::to_string(out_) + " output features leave tensor-parallel rank " + std::to_string(r) +
                    " of " + std::to_string(tp) + " none");
  b->row_ranges = w->row_ranges;
  weight_shard_ = w;
  bias_shard_ = b;
  weight_ = &add_parameter("weight", {local_out_, in_}, sharded(nn::weight_init(init, in_, out_), w));
  bias_ = bias ? &add_parameter("bias", {local_out_}, sharded(nn::bias_init(init, in_), b)) : nullptr;
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
  const auto [begin, end] = balanced_part(in_, group_->size(), group_->rank());
  local_in_ = end - begin;
  if (local_in_ == 0)
    throw_error(ErrorKind::kConfig, "RowParallelLinear",
                std::to_string(in_) + " input features leave tensor-parallel rank " +
                    std::to_string(group_->rank()) + " of " + std::to_string(group_->size()) + " none");
  auto w = std::make_shared<nn::InitShard>();
  w->full_shape = {out_, in_};
  w->full_cols = in_;
  w->col_begin = begin;
  w->cols = local_in_;
  w->row_ranges = {{0, out_}};
  weight_shard_ = w;
  weight_ = &add_parameter("weight", {out_, local_in_}, sharded(nn::weight_init(init, in_, out_), w));
  bias_ = bias ? &add_parameter("bias", {out_}, nn::bias_init(init, in_)) : nullptr;
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

Variable vocab_parallel_cross_entropy(const Variable& local_logits, int64_t begin, const std::vector<int32_t>& labels,
                                      float denominator, comm::ProcessGroup& group) {
  const Shape& s = local_logits.shape();
  if (s.size() != 2 || static_cast<int64_t>(labels.size()) != s[0])
    throw_error(ErrorKind::kShape, "vocab_parallel_cross_entropy",
                "logits " + shape_str(s) + " with " + std::to_string(labels.size()) +
                    " labels (expected [rows, columns] and one label per row)");
  const int64_t rows = s[0], cols = s[1];
  const float* l = local_logits.value().data();
  Tensor max = Tensor::empty({rows});
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, l[r * cols + c]);
    max.data()[r] = m;
  }
  comm::AllreduceOptions max_op;
  max_op.op = comm::ReduceOp::kMax;
  group.allreduce(max, max_op)->wait_or_throw();
  // Per row: the sum of exp(l - max) over this rank's columns, and the target's logit if it is here.
  Tensor sums = Tensor::zeros({2 * rows});
  for (int64_t r = 0; r < rows; ++r) {
    const float m = max.data()[r];
    double e = 0;
    for (int64_t c = 0; c < cols; ++c) e += std::exp(static_cast<double>(l[r * cols + c] - m));
    sums.data()[r] = static_cast<float>(e);
    const int64_t target = labels[static_cast<size_t>(r)] - begin;
    if (target >= 0 && target < cols) sums.data()[rows + r] = l[r * cols + target];
  }
  group.allreduce(sums)->wait_or_throw();
  const float scale = denominator > 0 ? 1.0f / denominator : 1.0f / static_cast<float>(rows);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    total += std::log(static_cast<double>(sums.data()[r])) + max.data()[r] - sums.data()[rows + r];
  Variable result(Tensor::full({}, static_cast<float>(total * scale)));
  if (!autograd::should_record({&local_logits})) return result;
  auto ls = local_logits.state(), ys = result.state();
  autograd::current_tape().record({ls}, ys, [ls, ys, max, sums, labels, begin, rows, cols, scale] {
    const float g = ys->grad.data()[0] * scale;
    const float* x = ls->value.data();
    GradTarget t = autograd::grad_target(*ls);
    for (int64_t r = 0; r < rows; ++r) {
      const float m = max.data()[r], inv = 1.0f / sums.data()[r];
      const int64_t target = labels[static_cast<size_t>(r)] - begin;
      for (int64_t c = 0; c < cols; ++c) {
        float d = std::exp(x[r * cols + c] - m) * inv - (c == target ? 1.0f : 0.0f);
        d *= g;
        t.data[r * cols + c] = t.accumulate ? t.data[r * cols + c] + d : d;
      }
    }
  });
  return result;
}

void vocab_parallel_argmax(const Tensor& local_logits, int64_t begin, int32_t* out, comm::ProcessGroup& group) {
  const int64_t rows = local_logits.shape()[0], cols = local_logits.shape()[1];
  const float* l = local_logits.data();
  Tensor best = Tensor::empty({rows});
  std::vector<int64_t> where(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t arg = 0;
    for (int64_t c = 1; c < cols; ++c)
      if (l[r * cols + c] > l[r * cols + arg]) arg = c;
    best.data()[r] = l[r * cols + arg];
    where[static_cast<size_t>(r)] = begin + arg;
  }
  Tensor global = best.clone();
  comm::AllreduceOptions max_op;
  max_op.op = comm::ReduceOp::kMax;
  group.allreduce(global, max_op)->wait_or_throw();
  // Among the ranks holding the maximum, the lowest column wins (argmax_rows takes the first).
  Tensor column = Tensor::empty({rows});
  for (int64_t r = 0; r < rows; ++r)
    column.data()[r] = best.data()[r] == global.data()[r] ? static_cast<float>(where[static_cast<size_t>(r)])
                                                          : std::numeric_limits<float>::infinity();
  comm::AllreduceOptions min_op;
  min_op.op = comm::ReduceOp::kMin;
  group.allreduce(column, min_op)->wait_or_throw();
  for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<int32_t>(column.data()[r]);
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t rows, int64_t dim, std::shared_ptr<comm::ProcessGroup> group,
                                               const nn::InitSpec& init)
    : rows_(rows), dim_(dim), group_(std::move(group)) {
  GRADMESH_CHECK(group_ != nullptr, "VocabParallelEmbedding needs a group");
  std::tie(begin_, end_) = balanced_part(rows_, group_->size(), group_->rank());
  if (end_ == begin_)
    throw_error(ErrorKind::kConfig, "VocabParallelEmbedding",
                std::to_string(rows_) + " rows leave tensor-parallel rank " + std::to_string(group_->rank()) +
                    " of " + std::to_string(group_->size()) + " none");
  auto shard = std::make_shared<nn::InitShard>();
  shard->full_shape = {rows_, dim_};
  shard->full_cols = shard->cols = dim_;
  shard->row_ranges = {{begin_, end_}};
  nn::InitSpec spec = init;
  spec.shard = shard;
  weight_ = &add_parameter("weight", {end_ - begin_, dim_}, spec);
}

Variable VocabParallelEmbedding::lookup(const std::vector<int64_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), local_rows = end_ - begin_;
  for (int64_t id : ids)
    if (id < 0 || id >= rows_)
      throw_error(ErrorKind::kShape, "VocabParallelEmbedding",
                  "id " + std::to_string(id) + " outside [0, " + std::to_string(rows_) + ")");
  const Variable& table = weight_->var;
  Tensor out = Tensor::zeros({n, dim_});
  const float* w = table.value().data();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = ids[static_cast<size_t>(i)] - begin_;
    if (local >= 0 && local < local_rows)
      std::memcpy(out.data() + i * dim_, w + local * dim_, static_cast<size_t>(dim_) * sizeof(float));
  }
  Variable mine(std::move(out));
  if (autograd::should_record({&table})) {
    auto ts = table.state(), ys = mine.state();
    const int64_t first = begin_, dim = dim_;
    autograd::current_tape().record({ts}, ys, [ts, ys, ids, first, local_rows, dim] {
      GradTarget t = autograd::grad_target(*ts);
      if (!t.accumulate) std::fill(t.data, t.data + local_rows * dim, 0.0f);
      const float* dy = ys->grad.data();
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t local = ids[i] - first;
        if (local < 0 || local >= local_rows) continue;
        for (int64_t c = 0; c < dim; ++c) t.data[local * dim + c] += dy[static_cast<int64_t>(i) * dim + c];
      }
    });
  }
  return reduce_from_tensor_parallel(mine, Variable(), *group_);
}

Variable VocabParallelEmbedding::forward(const Variable& ids) {
  std::vector<int64_t> list(static_cast<size_t>(ids.value().numel()));
  for (size_t i = 0; i < list.size(); ++i) list[i] = static_cast<int64_t>(ids.value().data()[i]);
  return lookup(list);
}

std::string VocabParallelEmbedding::describe() const {
  return "VocabParallelEmbedding(" + std::to_string(rows_) + ", " + std::to_string(dim_) + "; rows " +
         std::to_string(begin_) + ".." + std::to_string(end_) + " on this rank)";
}

GroupTensorSplit::GroupTensorSplit(std::shared_ptr<comm::ProcessGroup> group) : group_(std::move(group)) {
  GRADMESH_CHECK(group_ != nullptr, "GroupTensorSplit needs a group");
}

std::unique_ptr<nn::Module> GroupTensorSplit::column_linear(int64_t in, int64_t out, bool bias, int row_blocks,
                                                            const nn::InitSpec& weight, const nn::InitSpec& bias_init) {
  auto layer = std::make_unique<ColumnParallelLinear>(in, out, group_, bias, weight.kind, row_blocks);
  layer->set_init(weight, bias_init);
  return layer;
}

std::unique_ptr<nn::Module> GroupTensorSplit::row_linear(int64_t in, int64_t out, bool bias,
                                                         const nn::InitSpec& weight, const nn::InitSpec& bias_init) {
  auto layer = std::make_unique<RowParallelLinear>(in, out, group_, bias, weight.kind);
  layer->set_init(weight, bias_init);
  return layer;
}

std::unique_ptr<nn::Module> GroupTensorSplit::vocab_embedding(int64_t rows, int64_t dim, const nn::InitSpec& init) {
  vocab_rows_ = rows;
  return std::make_unique<VocabParallelEmbedding>(rows, dim, group_, init);
}

Variable GroupTensorSplit::embedding_table(nn::Module& vocab_embedding) {
  return static_cast<VocabParallelEmbedding&>(vocab_embedding).weight().var;
}

Variable GroupTensorSplit::lookup(nn::Module& vocab_embedding, const std::vector<int64_t>& ids) {
  return static_cast<VocabParallelEmbedding&>(vocab_embedding).lookup(ids);
}

Variable GroupTensorSplit::copy_to_group(const Variable& x) { return copy_to_tensor_parallel(x, *group_); }

Variable GroupTensorSplit::cross_entropy(const Variable& local_logits, const std::vector<int32_t>& labels,
                                         float denominator) {
  GRADMESH_CHECK(vocab_rows_ > 0, "a split cross-entropy before the vocabulary was split");
  return vocab_parallel_cross_entropy(local_logits, balanced_part(vocab_rows_, degree(), index()).first, labels,
                                      denominator, *group_);
}

void GroupTensorSplit::argmax_rows(const Variable& local_logits, int32_t* out) {
  GRADMESH_CHECK(vocab_rows_ > 0, "a split argmax before the vocabulary was split");
  vocab_parallel_argmax(local_logits.value(), balanced_part(vocab_rows_, degree(), index()).first, out, *group_);
}

}  // namespace gradmesh::parallel
