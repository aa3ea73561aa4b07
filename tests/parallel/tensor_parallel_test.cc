// Tensor-parallel layers against the unsplit layer, on tp = 1, 2, 4 ranks of
// a real shm group (ranks as threads): the split parameters start as the
// matching pieces of the unsplit ones (bit for bit), and the forward output,
// the input's gradient and every parameter's gradient agree with one process
// within float rounding (the split sums the row-parallel products in another
// order). Each layer alone, the pair as an MLP, and attention's packed
// q, k, v split by heads.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/collective_reference.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/nn/layers.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/parallel/tensor_parallel.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

using autograd::Variable;

constexpr int64_t kBatch = 2, kSeq = 3, kIn = 8, kHidden = 24, kOut = 6;
constexpr float kTolerance = 2e-6f;  // relative to the largest magnitude compared

Tensor random_tensor(const Shape& shape, uint64_t key) {
  Tensor t = Tensor::empty(shape);
  const CounterRng rng(17, RngPurpose::kInit, key);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(rng.normal(i));
  return t;
}

// Which elements of the unsplit tensor [rows, cols] a piece holds.
std::vector<float> piece(const std::vector<float>& full, int64_t cols, const std::vector<std::pair<int64_t, int64_t>>& rows,
                         int64_t col_begin, int64_t col_count) {
  std::vector<float> out;
  for (const auto& [begin, end] : rows)
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = col_begin; c < col_begin + col_count; ++c) out.push_back(full[static_cast<size_t>(r * cols + c)]);
  return out;
}

// The columns `cols` (ranges, in order) of every row of `full` [rows, width].
std::vector<float> piece_of_rows(const std::vector<float>& full, int64_t width,
                                 const std::vector<std::pair<int64_t, int64_t>>& cols) {
  std::vector<float> out;
  for (size_t row = 0; row < full.size() / static_cast<size_t>(width); ++row)
    for (const auto& [begin, end] : cols)
      for (int64_t c = begin; c < end; ++c) out.push_back(full[row * static_cast<size_t>(width) + static_cast<size_t>(c)]);
  return out;
}

std::string compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return what + ": " + std::to_string(got.size()) + " values, expected " + std::to_string(want.size()) + "\n";
  float scale = 1e-30f, worst = 0;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst <= kTolerance * scale ? "" : what + ": differs by " + std::to_string(worst / scale) + " (relative)\n";
}

// The unsplit reference: Linear(kIn, kHidden) -> GELU -> Linear(kHidden, kOut),
// or one of them alone; `qkv` makes the first layer attention's packed c_attn.
class Pair : public nn::Module {
 public:
  Pair(std::unique_ptr<nn::Module> first, std::unique_ptr<nn::Module> second) {
    if (first) first_ = &add_child("first", std::move(first));
    if (second) second_ = &add_child("second", std::move(second));
  }
  Variable forward(const Variable& x) override {
    Variable h = x;
    if (first_) h = first_->forward(h);
    if (first_ && second_) h = autograd::activation(h, kernels::Activation::kGelu);
    if (second_) h = second_->forward(h);
    return h;
  }
  std::string describe() const override { return "Pair"; }

 private:
  nn::Module* first_ = nullptr;
  nn::Module* second_ = nullptr;
};

// nn::Linear takes rows; the reference runs on [kBatch * kSeq, in] and is reshaped.
class TokenLinear : public nn::Module {
 public:
  TokenLinear(int64_t in, int64_t out) : out_(out) { linear_ = &static_cast<nn::Linear&>(add_child("inner", std::make_unique<nn::Linear>(in, out))); }
  Variable forward(const Variable& x) override {
    const Shape s = x.shape();
    Variable y = linear_->forward(autograd::reshape(x, {s[0] * s[1], s[2]}));
    return autograd::reshape(y, {s[0], s[1], out_});
  }
  std::string describe() const override { return "TokenLinear"; }

 private:
  int64_t out_;
  nn::Linear* linear_;
};

struct Result {
  std::vector<std::vector<float>> params, grads;
  std::vector<float> output, input_grad;
};

// loss = sum((y - probe)^2): every output element gets its own gradient. A
// split output is compared with the same elements of the unsplit probe.
Result run(nn::Module* root_ptr, const Tensor& input, const Tensor& probe) {
  autograd::current_tape().clear();
  nn::Model model(std::unique_ptr<nn::Module>(root_ptr), 3);
  model.zero_grad();
  Variable x(input.clone(), /*requires_grad=*/true);
  Variable y = model.forward(x);
  model.backward(autograd::mse_loss(y, probe, 1.0f));
  Result r;
  for (const auto& [name, t] : model.named_parameters()) r.params.push_back(t.to_vector());
  for (const nn::ParameterInfo& p : model.parameters())
    r.grads.push_back(model.flat_grads().slice_flat(p.offset, p.shape).to_vector());
  r.output = y.value().to_vector();
  r.input_grad = x.grad().to_vector();
  return r;
}

enum class Layout { kColumnOnly, kRowOnly, kMlp, kQkv };

// Runs `layout` split over `tp` ranks and unsplit; returns what differs.
std::string check_layout(Layout layout, int tp) {
  const int64_t first_out = layout == Layout::kQkv ? 3 * kHidden : kHidden;
  const Tensor input = random_tensor({kBatch, kSeq, layout == Layout::kRowOnly ? kHidden : kIn}, 1);
  auto reference_root = [&]() -> nn::Module* {
    switch (layout) {
      case Layout::kColumnOnly: return new Pair(std::make_unique<TokenLinear>(kIn, kHidden), nullptr);
      case Layout::kRowOnly: return new Pair(nullptr, std::make_unique<TokenLinear>(kHidden, kOut));
      case Layout::kMlp: return new Pair(std::make_unique<TokenLinear>(kIn, kHidden), std::make_unique<TokenLinear>(kHidden, kOut));
      case Layout::kQkv: return new Pair(std::make_unique<TokenLinear>(kIn, first_out), nullptr);
    }
    return nullptr;
  };
  const int64_t out_width = layout == Layout::kColumnOnly || layout == Layout::kQkv ? first_out : kOut;
  const Tensor probe = random_tensor({kBatch, kSeq, out_width}, 99);
  const Result whole = run(reference_root(), input, probe);

  ::gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<std::string> failures(static_cast<size_t>(tp));
  const auto errors = comm::testing::run_rank_threads(tp, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, tp, comm::Millis(20'000));
    std::unique_ptr<nn::Module> first, second;
    const int blocks = layout == Layout::kQkv ? 3 : 1;
    if (layout != Layout::kRowOnly)
      first = std::make_unique<ColumnParallelLinear>(kIn, first_out, group, true, nn::InitKind::kPytorchDefault, blocks);
    if (layout == Layout::kRowOnly || layout == Layout::kMlp)
      second = std::make_unique<RowParallelLinear>(kHidden, kOut, group);
    // The row-parallel layer alone takes this rank's slice of the input.
    Tensor my_input = input;
    const int64_t width = kHidden / tp;
    if (layout == Layout::kRowOnly) {
      my_input = Tensor::empty({kBatch, kSeq, width});
      for (int64_t row = 0; row < kBatch * kSeq; ++row)
        for (int64_t c = 0; c < width; ++c)
          my_input.data()[row * width + c] = input.data()[row * kHidden + rank * width + c];
    }
    std::string& f = failures[static_cast<size_t>(rank)];
    // Parameters: 0/1 the first layer's weight and bias, then the second's.
    size_t p = 0;
    const int64_t block = first_out / blocks, mine = block / tp;
    std::vector<std::pair<int64_t, int64_t>> out_rows;
    for (int b = 0; b < blocks; ++b) out_rows.emplace_back(b * block + rank * mine, b * block + (rank + 1) * mine);
    Tensor my_probe = probe;
    if (layout == Layout::kColumnOnly || layout == Layout::kQkv)
      my_probe = Tensor::from_vector({kBatch, kSeq, first_out / tp}, piece_of_rows(probe.to_vector(), first_out, out_rows));
    const Result split = run(new Pair(std::move(first), std::move(second)), my_input, my_probe);
    if (layout != Layout::kRowOnly) {
      const std::vector<float> w = piece(whole.params[0], kIn, out_rows, 0, kIn);
      const std::vector<float> b = piece(whole.params[1], 1, out_rows, 0, 1);
      if (split.params[0] != w || split.params[1] != b) f += "column-parallel init is not the unsplit layer's piece\n";
      f += compare("column weight grad", split.grads[0], piece(whole.grads[0], kIn, out_rows, 0, kIn));
      f += compare("column bias grad", split.grads[1], piece(whole.grads[1], 1, out_rows, 0, 1));
      p = 2;
    }
    if (layout == Layout::kRowOnly || layout == Layout::kMlp) {
      const size_t wp = layout == Layout::kRowOnly ? 0 : 2;
      if (split.params[p] != piece(whole.params[wp], kHidden, {{0, kOut}}, rank * width, width) ||
          split.params[p + 1] != whole.params[wp + 1])
        f += "row-parallel init is not the unsplit layer's piece\n";
      f += compare("row weight grad", split.grads[p], piece(whole.grads[wp], kHidden, {{0, kOut}}, rank * width, width));
      f += compare("row bias grad", split.grads[p + 1], whole.grads[wp + 1]);
    }
    // Outputs: a column-parallel output is this rank's columns; a row-parallel one is whole.
    if (layout == Layout::kColumnOnly || layout == Layout::kQkv)
      f += compare("output", split.output, piece_of_rows(whole.output, first_out, out_rows));
    else
      f += compare("output", split.output, whole.output);
    // The input's gradient: whole after Megatron's f; the row layer alone gives this rank's columns.
    if (layout == Layout::kRowOnly)
      f += compare("input grad", split.input_grad, piece(whole.input_grad, kHidden, {{0, kBatch * kSeq}}, rank * width, width));
    else
      f += compare("input grad", split.input_grad, whole.input_grad);
  });
  return comm::testing::join_errors(errors) + comm::testing::join_errors(failures);
}

TEST(TensorParallel, ColumnParallelLinearMatchesTheUnsplitLayer) {
  for (int tp : {1, 2, 4}) EXPECT_EQ(check_layout(Layout::kColumnOnly, tp), "") << "tp " << tp;
}

TEST(TensorParallel, RowParallelLinearMatchesTheUnsplitLayer) {
  for (int tp : {1, 2, 4}) EXPECT_EQ(check_layout(Layout::kRowOnly, tp), "") << "tp " << tp;
}

TEST(TensorParallel, ColumnThenRowIsTheUnsplitMlp) {
  for (int tp : {1, 2, 4}) EXPECT_EQ(check_layout(Layout::kMlp, tp), "") << "tp " << tp;
}

TEST(TensorParallel, PackedQkvKeepsEachRanksHeadsOfQueriesKeysAndValues) {
  for (int tp : {1, 2, 4}) EXPECT_EQ(check_layout(Layout::kQkv, tp), "") << "tp " << tp;
}

// Features need not divide (the first ranks take one more); attention's
// packed blocks must, and a rank left with nothing is an error too.
TEST(TensorParallel, UnevenFeaturesSplitBalancedAndHeadBlocksMustDivide) {
  EXPECT_EQ(balanced_part(7, 2, 0), (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(balanced_part(7, 2, 1), (std::pair<int64_t, int64_t>{4, 7}));
  EXPECT_EQ(balanced_part(13, 4, 3), (std::pair<int64_t, int64_t>{10, 13}));
  ::gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  const auto errors = comm::testing::run_rank_threads(2, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 2, comm::Millis(20'000));
    EXPECT_EQ(ColumnParallelLinear(4, 7, group).weight().shape, (Shape{rank == 0 ? 4 : 3, 4}));
    EXPECT_EQ(RowParallelLinear(5, 3, group).weight().shape, (Shape{3, rank == 0 ? 3 : 2}));
    try {
      ColumnParallelLinear bad(4, 9, group, true, nn::InitKind::kPytorchDefault, /*row_blocks=*/3);
      ADD_FAILURE() << "blocks of 3 split over 2 ranks";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("ColumnParallelLinear out_features: 3 does not split into 2"),
                std::string::npos)
          << e.what();
    }
    if (rank == 1) {
      EXPECT_THROW(RowParallelLinear(1, 3, group), Error);  // one input feature leaves rank 1 none
    }
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
}

}  // namespace
}  // namespace gradmesh::parallel
