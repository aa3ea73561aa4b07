// Pipeline-parallel training through the real binary (parallel.mesh pp > 1):
// a 4-block GPT (tied head, AdamW with decay and clipping) on 2 and 4
// stages under 1F1B, on 2 stages under GPipe, and on dp 2 x pp 2 ends with
// the weights and the test loss of one process; its checkpoints (in pieces,
// joined by gradmesh export into the whole model) resume bit for bit under
// the same layout and within rounding under others. Skips visibly without
// fortunes.
//
// Tolerance, stated: after 20 AdamW steps (lr 0.003, clipped at 0.5) every
// tensor within 2e-3 of its largest magnitude. The stages sum each
// gradient over 4 micro-batches instead of one batch (and dp 2 over two
// ranks), and AdamW's division by sqrt(v) enlarges that rounding where v is
// tiny (attention's key bias, whose true gradient is zero, differs most).
// Measured on this run: 2.9e-4 (pp 4), 8.9e-4 (dp 2 x pp 2), 3.0e-4 (GPipe);
// plain data parallelism on 2 ranks differs by 1.1e-3 on a like run.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>

#include "train/zero_runs.h"

namespace gradmesh::testing {
namespace {

constexpr double kPipelineTolerance = 2e-3;

std::string compare_pipeline_runs(const std::string& a_path, const std::string& b_path) {
  return compare_weight_files(a_path, b_path, kPipelineTolerance);
}

// Four blocks, a batch of 8 in 4 micro-batches; evaluation on 40 windows.
const std::string kFourBlocks = " --set model.n_layer=4 --set train.max_steps=20 --set data.limit_test=40";

class PipelineTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ws_.available()) GTEST_SKIP() << "fortunes not installed (" << kFortunes << ")";
  }
  CommandResult train_ok(const std::string& id, const std::string& extra) {
    CommandResult r = ws_.train(id, kFourBlocks + extra);
    EXPECT_EQ(r.exit_code, 0) << id << ": " << r.err;
    return r;
  }
  std::string weights(const std::string& id) const { return ws_.file("runs/" + id + "/model.safetensors"); }
  double test_loss(const std::string& id) const {
    return last_metrics_line(ws_.file("runs/" + id), "epoch")["test_loss"].get<double>();
  }
  GptWorkspace ws_;
};

TEST_F(PipelineTraining, EveryScheduleAndLayoutTrainsTheWeightsOfOneProcess) {
  const std::string eval = " --set train.eval_every_epoch=true";
  train_ok("one", eval);
  struct PipelineLayout {
    const char* id;
    std::string extra, split;
    int ranks, stages;
  };
  for (const PipelineLayout& l :
       {PipelineLayout{"pp2", " --set parallel.mesh.pp=2 --set output.report=true --nproc-per-node 2",
               "stage 0: blocks 0-1 (+ embeddings), stage 1: blocks 2-3 (+ head); 1f1b", 2, 2},
        PipelineLayout{"pp4", " --set parallel.mesh.pp=4 --nproc-per-node 4", "stage 3: blocks 3 (+ head); 1f1b, 4 micro-batches", 4, 4},
        PipelineLayout{"gpipe", " --set parallel.mesh.pp=2 --set parallel.pipeline_schedule=gpipe --nproc-per-node 2", "; gpipe", 2, 2},
        PipelineLayout{"dp2pp2", " --set parallel.mesh.pp=2 --nproc-per-node 4", "1f1b", 4, 2}}) {
    const CommandResult r = train_ok(l.id, eval + l.extra);
    EXPECT_NE(r.err.find("pipeline: "), std::string::npos) << l.id << ": " << r.err;
    EXPECT_NE(r.err.find(l.split), std::string::npos) << l.id << ": " << r.err;
    EXPECT_EQ(compare_pipeline_runs(weights(l.id), weights("one")), "") << l.id;
    EXPECT_NEAR(test_loss(l.id), test_loss("one"), 1e-4 * test_loss("one")) << l.id;
    // The logged loss is the batch's, reported once (by the last stage).
    const double loss = last_metrics_line(ws_.file(std::string("runs/") + l.id), "summary")["final_train_loss"];
    const double one = last_metrics_line(ws_.file("runs/one"), "summary")["final_train_loss"];
    EXPECT_NEAR(loss, one, 1e-4 * one) << l.id;
    // The bubble: each rank's idle share, and the textbook figure for 4 micro-batches.
    const nlohmann::json summary = last_metrics_line(ws_.file(std::string("runs/") + l.id), "summary");
    ASSERT_EQ(summary["pipeline_bubble_per_rank"].size(), static_cast<size_t>(l.ranks)) << summary.dump();
    for (const auto& b : summary["pipeline_bubble_per_rank"]) {
      EXPECT_GE(b.get<double>(), 0.0) << summary.dump();
      EXPECT_LT(b.get<double>(), 1.0) << summary.dump();
    }
    EXPECT_DOUBLE_EQ(summary["pipeline_bubble_textbook"].get<double>(), (l.stages - 1.0) / (4.0 + l.stages - 1.0));
  }
  EXPECT_FALSE(last_metrics_line(ws_.file("runs/one"), "summary").contains("pipeline_bubble_per_rank"));
  std::ifstream report(ws_.file("runs/pp2/report.html"));
  const std::string html((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("pipeline bubble"), std::string::npos);
  EXPECT_NE(html.find("(p-1)/(m+p-1) = 0.200"), std::string::npos);
}

// bf16 products through a two-stage pipeline: each micro-batch's rows round
// as the whole batch's do, and the losses agree; the weights part where
// gradients are bf16 rounding noise that AdamW scales up (see
// TensorParallelTraining.Bf16ProductsSplitAcrossRanksTrainLikeOneBf16Process).
TEST_F(PipelineTraining, Bf16ProductsThroughStagesTrainLikeOneBf16Process) {
  const std::string bf16 = " --set train.precision=\"bf16\" --set train.eval_every_epoch=true";
  train_ok("one-bf16", bf16);
  train_ok("pp2-bf16", bf16 + " --set parallel.mesh.pp=2 --nproc-per-node 2");
  EXPECT_NEAR(test_loss("pp2-bf16"), test_loss("one-bf16"), 5e-3 * test_loss("one-bf16"));
}

TEST_F(PipelineTraining, CheckpointsJoinIntoTheWholeModelAndResumeUnderAnyLayout) {
  const std::string every10 = " --set checkpoint.every_steps=10 --set checkpoint.keep_last=0";
  const std::string pp2 = " --set parallel.mesh.pp=2 --nproc-per-node 2";
  train_ok("full", every10 + pp2);
  const std::string step10 = "runs/full/checkpoints/step-10";
  train_ok("whole", " --set train.max_steps=10");
  const CommandResult joined = run_gradmesh("export " + step10 + " -o joined.safetensors", ws_.dir().path());
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  const auto saved = named_weights(ws_.file("joined.safetensors"));
  const auto whole = named_weights(weights("whole"));
  ASSERT_EQ(saved.size(), whole.size()) << "every stage's parameters, the tied table once";
  for (const auto& [name, values] : whole) EXPECT_EQ(saved.at(name).size(), values.size()) << name;
  const std::string resume = " --resume " + step10;
  train_ok("same", resume + pp2);
  EXPECT_EQ(named_weights(weights("same")), named_weights(weights("full"))) << "the same layout: bit for bit";
  train_ok("unsplit", resume);
  EXPECT_EQ(compare_pipeline_runs(weights("unsplit"), weights("full")), "");
  train_ok("four", resume + " --set parallel.mesh.pp=4 --nproc-per-node 4");
  EXPECT_EQ(compare_pipeline_runs(weights("four"), weights("full")), "");
}

// Activations of 1 MiB per micro-batch span several of shm's 256 KiB mailbox
// chunks, so a send waits for its receiver: sends must never block a stage's
// own thread (they once ran inline there and deadlocked 1F1B: each stage
// sending while the other waited for its gradient).
TEST_F(PipelineTraining, ActivationsLargerThanTheMailboxStreamWithoutDeadlock) {
  const std::string big = " --set model.n_embd=256 --set model.n_head=4 --set model.block_size=128"
                          " --set train.batch_size=32 --set train.max_steps=2 --set parallel.timeout_s=60";
  for (int pp : {2, 4}) {
    const std::string n = std::to_string(pp);
    train_ok("big" + n, big + " --set parallel.mesh.pp=" + n + " --nproc-per-node " + n);
  }
}

TEST_F(PipelineTraining, WhatPipelinesCannotRunIsAConfigErrorNamingTheKey) {
  struct Case {
    std::string extra, key;
  };
  for (const Case& c : {Case{" --set model.dropout=0.1", "model.dropout"},
                        Case{" --set train.accum_steps=2", "train.accum_steps"},
                        Case{" --set parallel.micro_batches=16", "parallel.micro_batches"},
                        Case{" --set parallel.zero=3", "parallel.zero"},
                        Case{" --set model.n_layer=1", "parallel.mesh.pp"}}) {
    const CommandResult r =
        ws_.train("bad", " --set train.max_steps=2 --set parallel.mesh.pp=2 --nproc-per-node 2" + c.extra);
    EXPECT_EQ(r.exit_code, 2) << c.extra << ": " << r.err;
    EXPECT_NE(r.err.find(c.key), std::string::npos) << c.extra << ": " << r.err;
  }
}

}  // namespace
}  // namespace gradmesh::testing
