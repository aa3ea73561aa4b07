#include "gradmesh/nn/init.h"

#include <algorithm>
#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::nn {

InitKind parse_weight_init(const std::string& name) {
  if (name == "default") return InitKind::kPytorchDefault;
  if (name == "kaiming_normal") return InitKind::kKaimingNormal;
  if (name == "kaiming_uniform") return InitKind::kKaimingUniform;
  if (name == "xavier_uniform") return InitKind::kXavierUniform;
  if (name == "xavier_normal") return InitKind::kXavierNormal;
  throw_error(ErrorKind::kConfig, "model.init",
              "expected default, kaiming_normal, kaiming_uniform, xavier_uniform or xavier_normal, got '" + name + "'");
}


Tensor take_piece(const Tensor& whole, const InitShard& shard) {
  GRADMESH_CHECK(whole.shape() == shard.full_shape && whole.dtype() == DType::kF32, "take_piece of another shape");
  int64_t rows = 0;
  for (const auto& [begin, end] : shard.row_ranges) rows += end - begin;
  Tensor piece = Tensor::empty(shard.full_shape.size() == 1 ? Shape{rows} : Shape{rows, shard.cols});
  for_each_piece_run(shard, [&](int64_t at, int64_t from, int64_t n) {
    std::copy(whole.data() + from, whole.data() + from + n, piece.data() + at);
  });
  return piece;
}

void put_piece(const Tensor& piece, const InitShard& shard, Tensor& whole) {
  GRADMESH_CHECK(whole.shape() == shard.full_shape, "put_piece into another shape");
  for_each_piece_run(shard, [&](int64_t at, int64_t to, int64_t n) {
    std::copy(piece.data() + at, piece.data() + at + n, whole.data() + to);
  });
}

void initialize(Tensor& t, const InitSpec& spec, uint64_t seed, uint64_t param_index) {
  initialize_elements(t.data(), 0, t.numel(), spec, seed, param_index);
}

namespace {

// The full parameter's element index of each element of a piece (InitShard).
class FullIndex {
 public:
  explicit FullIndex(const InitShard* shard) : shard_(shard) {}
  int64_t operator()(int64_t local) const {
    if (shard_ == nullptr) return local;
    const int64_t r = local / shard_->cols, c = local % shard_->cols;
    int64_t before = 0;
    for (const auto& [begin, end] : shard_->row_ranges) {
      if (r < before + (end - begin)) return (begin + r - before) * shard_->full_cols + shard_->col_begin + c;
      before += end - begin;
    }
    GRADMESH_CHECK(false, "an element beyond the rows of its InitShard");
    return -1;
  }

 private:
  const InitShard* shard_;
};

}  // namespace

void initialize_elements(float* data, int64_t first, int64_t count, const InitSpec& spec, uint64_t seed,
                         uint64_t param_index) {
  const CounterRng rng(seed, RngPurpose::kInit, param_index);
  const FullIndex full(spec.shard.get());
  const double fan_in = static_cast<double>(spec.fan_in), fan_sum = static_cast<double>(spec.fan_in + spec.fan_out);
  auto fill_uniform = [&](double bound) {
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>((2.0 * rng.uniform(full(first + i)) - 1.0) * bound);
  };
  auto fill_normal = [&](double std) {
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(rng.normal(full(first + i)) * std);
  };
  switch (spec.kind) {
    case InitKind::kPytorchDefault: fill_uniform(1.0 / std::sqrt(fan_in)); return;
    case InitKind::kKaimingNormal: fill_normal(std::sqrt(2.0 / fan_in)); return;
    case InitKind::kKaimingUniform: fill_uniform(std::sqrt(6.0 / fan_in)); return;
    case InitKind::kXavierUniform: fill_uniform(std::sqrt(6.0 / fan_sum)); return;
    case InitKind::kXavierNormal: fill_normal(std::sqrt(2.0 / fan_sum)); return;
    case InitKind::kNormal: fill_normal(spec.std); return;
    case InitKind::kZeros: std::fill(data, data + count, 0.0f); return;
    case InitKind::kOnes: std::fill(data, data + count, 1.0f); return;
  }
}

}  // namespace gradmesh::nn
