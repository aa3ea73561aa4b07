// A whole GPT split over tp = 1, 2, 4 ranks of a real shm group (ranks as
// threads) against the same GPT in one piece: heads, MLP features and the
// vocabulary divided (13 tokens: uneven on 2 and 4 ranks), tied and untied
// heads. Every split parameter starts as its piece of the whole model (bit
// for bit); the loss, every gradient piece and the predicted tokens agree
// with one process within float rounding; no rank holds all logits.
#include <gtest/gtest.h>

#include <mutex>

#include <cmath>

#include "comm/collective_reference.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/parallel/tensor_parallel.h"
#include "gradmesh/parallel/whole_model_view.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

using autograd::Variable;

constexpr int64_t kGptBatch = 3, kGptSeq = 8, kVocab = 13;
constexpr float kGptTolerance = 1e-5f;  // relative to the largest magnitude of the tensor compared

nn::GptSpec spec(bool tied) {
  nn::GptSpec s;
  s.vocab_size = kVocab;
  s.block_size = kGptSeq;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_embd = 16;
  s.tie_weights = tied;
  return s;
}

struct Pass {
  float loss = 0;
  double grad_norm = 0;  // over the whole model (split: through WholeModelView)
  std::vector<std::vector<float>> params, grads;
  std::vector<std::shared_ptr<const nn::InitShard>> shards;  // per parameter: its piece of the whole (null: whole)
  std::vector<int32_t> predicted;
  int64_t logits_columns = 0;
  int64_t num_parameters = 0;
  std::vector<float> flat;               // the flat parameters
  std::vector<ViewSegment> provided;     // split: WholeModelView::provided_segments
};

Pass run_gpt(const nn::GptSpec& s, const std::shared_ptr<comm::ProcessGroup>& tp = nullptr) {
  autograd::current_tape().clear();
  nn::Model model(nn::build_gpt(s), 11);
  Tensor ids = Tensor::empty({kGptBatch, kGptSeq});
  std::vector<int32_t> labels(static_cast<size_t>(kGptBatch * kGptSeq));
  for (int64_t i = 0; i < kGptBatch * kGptSeq; ++i) {
    ids.data()[i] = static_cast<float>((i * 7 + 3) % kVocab);
    labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % kVocab);
  }
  model.zero_grad();
  Variable logits = model.forward(Variable(ids));
  Variable loss = model.root().loss(logits, labels, 0);
  model.backward(loss);
  Pass p;
  p.loss = loss.value().item();
  // The norm a clip would use (max_norm far above it: nothing is scaled).
  p.flat = model.flat_params().to_vector();
  if (tp) {
    const WholeModelView view(model, tp);
    p.grad_norm = view.clip_grad_norm(1e30f);
    p.provided = view.provided_segments();
  } else {
    p.grad_norm = optim::grad_norm(model.flat_grads().data(), model.num_parameters());
  }
  p.logits_columns = logits.shape()[1];
  p.num_parameters = model.num_parameters();
  p.predicted.resize(labels.size());
  model.root().predict(logits, p.predicted.data());
  std::vector<std::pair<std::string, nn::Parameter*>> named;
  model.root().collect_parameters("", named);
  for (size_t i = 0; i < named.size(); ++i) {
    const nn::ParameterInfo& info = model.parameters()[i];
    p.params.push_back(model.flat_params().slice_flat(info.offset, info.shape).to_vector());
    p.grads.push_back(model.flat_grads().slice_flat(info.offset, info.shape).to_vector());
    p.shards.push_back(named[i].second->init.shard);
  }
  return p;
}

std::vector<float> shard_piece(const std::vector<float>& full, const nn::InitShard* shard) {
  if (shard == nullptr) return full;
  std::vector<float> out;
  for (const auto& [begin, end] : shard->row_ranges)
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < shard->cols; ++c)
        out.push_back(full[static_cast<size_t>(r * shard->full_cols + shard->col_begin + c)]);
  return out;
}

float float_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 1e-30f, worst = 0;
  for (float v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst / scale;
}

std::string check_split_gpt(bool tied, int tp) {
  const Pass whole = run_gpt(spec(tied));
  ::gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  std::vector<std::string> failures(static_cast<size_t>(tp));
  std::mutex mutex;
  std::vector<int> provided_times(whole.flat.size(), 0);  // how many ranks provide each whole element
  const auto errors = comm::testing::run_rank_threads(tp, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, tp, comm::Millis(20'000));
    nn::GptSpec s = spec(tied);
    s.split = std::make_shared<GroupTensorSplit>(group);
    const Pass split = run_gpt(s, group);
    {
      // What a sharded checkpoint stores: each segment is the whole model's elements there.
      const std::lock_guard<std::mutex> lock(mutex);
      for (const ViewSegment& seg : split.provided)
        for (int64_t k = 0; k < seg.count; ++k) {
          ++provided_times[static_cast<size_t>(seg.whole + k)];
          if (split.flat[static_cast<size_t>(seg.local + k)] != whole.flat[static_cast<size_t>(seg.whole + k)]) {
            failures[static_cast<size_t>(rank)] += "provided element " + std::to_string(seg.whole + k) + " differs\n";
            return;
          }
        }
    }
    if (std::fabs(split.grad_norm - whole.grad_norm) > kGptTolerance * whole.grad_norm)
      failures[static_cast<size_t>(rank)] += "gradient norm " + std::to_string(split.grad_norm) + " vs " +
                                             std::to_string(whole.grad_norm) + "\n";
    std::string& f = failures[static_cast<size_t>(rank)];
    if (split.params.size() != whole.params.size()) {
      f += "the split model has " + std::to_string(split.params.size()) + " parameters, the whole one " +
          std::to_string(whole.params.size());
      return;
    }
    const auto [begin, end] = balanced_part(kVocab, tp, rank);
    if (split.logits_columns != end - begin)
      f += "logits have " + std::to_string(split.logits_columns) + " columns, expected this rank's " +
           std::to_string(end - begin) + "\n";
    if (std::fabs(split.loss - whole.loss) > kGptTolerance * std::fabs(whole.loss))
      f += "loss " + std::to_string(split.loss) + " vs " + std::to_string(whole.loss) + "\n";
    if (split.predicted != whole.predicted) f += "predicted tokens differ\n";
    // The memory estimate's count is the largest rank's: rank 0's (the first ranks take the remainders).
    const int64_t counted = nn::gpt_parameter_count(spec(tied), tp);
    if (rank == 0 ? split.num_parameters != counted : split.num_parameters > counted)
      f += "holds " + std::to_string(split.num_parameters) + " parameters, gpt_parameter_count says " +
           std::to_string(counted) + "\n";
    for (size_t i = 0; i < whole.params.size(); ++i) {
      const std::vector<float> init = shard_piece(whole.params[i], split.shards[i].get());
      if (split.params[i] != init) f += "parameter " + std::to_string(i) + " does not start as its piece\n";
      const std::vector<float> grad = shard_piece(whole.grads[i], split.shards[i].get());
      if (grad.size() != split.grads[i].size()) {
        f += "parameter " + std::to_string(i) + " has the wrong size\n";
        continue;
      }
      const float d = float_relative_difference(split.grads[i], grad);
      if (!(d <= kGptTolerance)) f += "gradient of parameter " + std::to_string(i) + " differs by " + std::to_string(d) + "\n";
    }
  });
  std::string coverage;
  for (size_t i = 0; i < provided_times.size() && coverage.empty(); ++i)
    if (provided_times[i] != 1)
      coverage = "whole element " + std::to_string(i) + " is provided " + std::to_string(provided_times[i]) + " times\n";
  return comm::testing::join_errors(errors) + comm::testing::join_errors(failures) + coverage;
}

TEST(TensorParallelGpt, TiedSplitModelMatchesOneProcess) {
  for (int tp : {1, 2, 4}) EXPECT_EQ(check_split_gpt(/*tied=*/true, tp), "") << "tp " << tp;
}

TEST(TensorParallelGpt, UntiedSplitModelMatchesOneProcess) {
  for (int tp : {2, 4}) EXPECT_EQ(check_split_gpt(/*tied=*/false, tp), "") << "tp " << tp;
}

TEST(TensorParallelGpt, HeadsThatDoNotDivideAreAConfigErrorNamingTheKey) {
  ::gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  const auto errors = comm::testing::run_rank_threads(3, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, 3, comm::Millis(20'000));
    nn::GptSpec s = spec(true);
    s.n_embd = 12;
    s.split = std::make_shared<GroupTensorSplit>(group);
    try {
      nn::build_gpt(s);
      ADD_FAILURE() << "4 heads over 3 ranks";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("model.n_head: 4 heads do not divide among 3 tensor-parallel ranks"),
                std::string::npos)
          << e.what();
    }
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
}

}  // namespace
}  // namespace gradmesh::parallel
