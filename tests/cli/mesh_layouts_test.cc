// Every layout of up to four processes, dp x pp x tp with each in {1, 2, 4},
// with and without ZeRO on the dp dimension, trains the same GPT as one
// process: the same loss at every logged step, the same test loss and the
// same weights after 20 steps. Split checkpoints are written in pieces with
// the layout in the manifest, and load under every other layout. Through the
// real binary; skips visibly without fortunes.
//
// Tolerance, stated: every tensor within 2e-3 of its largest magnitude and
// every logged loss within 1e-4 of one process's, relative. The layouts sum
// the same gradients in other orders (over micro-batches, ranks, split
// products), and AdamW's division by sqrt(v) enlarges that rounding where v
// is tiny; tensor_parallel_training_test.cc and pipeline_training_test.cc
// give the measured differences.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "train/zero_runs.h"

namespace gradmesh::testing {
namespace {

constexpr double kRelativeTolerance = 2e-3;

// Four blocks and four heads (so tp = 4 splits them), a batch of 8 in 4
// pipeline micro-batches, a loss logged every 4 steps.
const std::string kModel = " --set model.n_layer=4 --set model.n_head=4 --set train.max_steps=20"
                           " --set train.log_every=4 --set data.limit_test=40 --set train.eval_every_epoch=true";

struct Layout {
  int dp, pp, tp, zero;
  std::string id() const {
    return "dp" + std::to_string(dp) + "pp" + std::to_string(pp) + "tp" + std::to_string(tp) + "z" +
           std::to_string(zero);
  }
  std::string flags() const {
    return " --set parallel.mesh.pp=" + std::to_string(pp) + " --set parallel.mesh.tp=" + std::to_string(tp) +
           " --set parallel.zero=" + std::to_string(zero) + " --nproc-per-node " + std::to_string(dp * pp * tp);
  }
};

// The losses of a run's step lines, in order.
std::vector<double> logged_losses(const std::string& run_dir) {
  std::vector<double> losses;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("type", "") == "step") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

class MeshLayouts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ws_.available()) GTEST_SKIP() << "fortunes not installed (" << kFortunes << ")";
  }
  CommandResult train_ok(const std::string& id, const std::string& extra) {
    CommandResult r = ws_.train(id, kModel + extra);
    EXPECT_EQ(r.exit_code, 0) << id << ": " << r.err;
    return r;
  }
  std::string weights(const std::string& id) const { return ws_.file("runs/" + id + "/model.safetensors"); }
  // The checkpoint's weights joined into one file by gradmesh export.
  std::string exported(const std::string& step_dir, const std::string& name) const {
    const CommandResult r = run_gradmesh("export " + step_dir + " -o " + name, ws_.dir().path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ws_.file(name);
  }
  nlohmann::json manifest(const std::string& step_dir) const {
    std::ifstream in(ws_.file(step_dir + "/manifest.json"));
    return nlohmann::json::parse(in);
  }
  GptWorkspace ws_;
};

TEST_F(MeshLayouts, EveryLayoutOfUpToFourProcessesTrainsTheWeightsOfOneProcess) {
  train_ok("one", "");
  const std::vector<double> one = logged_losses(ws_.file("runs/one"));
  ASSERT_EQ(one.size(), 5u);
  const double one_test = last_metrics_line(ws_.file("runs/one"), "epoch")["test_loss"].get<double>();
  for (const Layout& l : {Layout{2, 1, 1, 0}, Layout{1, 2, 1, 0}, Layout{1, 1, 2, 0}, Layout{4, 1, 1, 0},
                          Layout{1, 4, 1, 0}, Layout{1, 1, 4, 0}, Layout{2, 2, 1, 0}, Layout{2, 1, 2, 0},
                          Layout{1, 2, 2, 0}, Layout{2, 1, 1, 1}, Layout{4, 1, 1, 2}, Layout{2, 2, 1, 1},
                          Layout{2, 1, 2, 2}, Layout{2, 1, 2, 3}}) {
    const CommandResult r = train_ok(l.id(), l.flags());
    const std::string mesh = "mesh: dp " + std::to_string(l.dp) + " x pp " + std::to_string(l.pp) + " x tp " +
                             std::to_string(l.tp);
    if (l.pp > 1 || l.tp > 1) {
      EXPECT_NE(r.err.find(mesh), std::string::npos) << r.err;
    }
    EXPECT_EQ(compare_weight_files(weights(l.id()), weights("one"), kRelativeTolerance), "") << l.id();
    const std::vector<double> losses = logged_losses(ws_.file("runs/" + l.id()));
    ASSERT_EQ(losses.size(), one.size()) << l.id();
    for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(losses[i], one[i], 1e-4 * one[i]) << l.id() << " log " << i;
    const double test = last_metrics_line(ws_.file("runs/" + l.id()), "epoch")["test_loss"].get<double>();
    EXPECT_NEAR(test, one_test, 1e-4 * one_test) << l.id();
  }
}

TEST_F(MeshLayouts, SplitCheckpointsAreWrittenInPiecesAndLoadUnderEveryLayout) {
  const std::string every10 = " --set checkpoint.every_steps=10 --set checkpoint.keep_last=0";
  const Layout saved{1, 2, 2, 0};
  train_ok("full", every10 + saved.flags());
  const std::string step10 = "runs/full/checkpoints/step-10";
  // One weight shard and one optimizer shard per rank, the layout in the
  // manifest, and no whole model.safetensors: no rank gathered the model.
  const nlohmann::json m = manifest(step10);
  EXPECT_EQ(m["layout"], nlohmann::json({{"dp", 1}, {"pp", 2}, {"tp", 2}, {"zero", 0}})) << m.dump();
  std::map<std::string, int> shards;
  for (const auto& f : m["files"]) {
    EXPECT_NE(f["path"], "model.safetensors");
    if (f.contains("shard")) ++shards[f["shard"]["of"].get<std::string>()];
  }
  EXPECT_EQ(shards, (std::map<std::string, int>{{"model", 4}, {"optimizer", 4}}));
  // Joined, they are the whole model with PyTorch's names and shapes.
  train_ok("whole", " --set train.max_steps=10");
  const auto joined = named_weights(exported(step10, "step10.safetensors"));
  const auto whole = named_weights(weights("whole"));
  ASSERT_EQ(joined.size(), whole.size());
  for (const auto& [name, values] : whole) EXPECT_EQ(joined.at(name).size(), values.size()) << name;
  EXPECT_EQ(compare_weight_files(ws_.file("step10.safetensors"), weights("whole"), kRelativeTolerance), "");

  const std::string resume = " --resume " + step10;
  train_ok("same", resume + saved.flags());
  EXPECT_EQ(named_weights(weights("same")), named_weights(weights("full"))) << "the same layout: bit for bit";
  for (const Layout& l :
       {Layout{1, 1, 1, 0}, Layout{2, 1, 1, 2}, Layout{1, 4, 1, 0}, Layout{2, 1, 2, 1}, Layout{2, 1, 2, 3}}) {
    train_ok("from-" + l.id(), resume + (l.dp * l.pp * l.tp > 1 ? l.flags() : ""));
    EXPECT_EQ(compare_weight_files(weights("from-" + l.id()), weights("full"), kRelativeTolerance), "") << l.id();
  }
  // A ZeRO-sharded split checkpoint: every rank writes the pieces whose state it owns.
  const Layout zero{2, 2, 1, 1};
  train_ok("zero", every10 + zero.flags());
  const nlohmann::json mz = manifest("runs/zero/checkpoints/step-10");
  EXPECT_EQ(mz["layout"]["zero"], 1);
  EXPECT_EQ(mz["files"].size(), 9u) << "4 weight shards, 4 optimizer shards, trainer.json";
  train_ok("zero-tp", " --resume runs/zero/checkpoints/step-10" + Layout{1, 1, 2, 0}.flags());
  EXPECT_EQ(compare_weight_files(weights("zero-tp"), weights("full"), kRelativeTolerance), "");
  // inspect names the layout.
  const CommandResult inspect = run_gradmesh("inspect " + step10, ws_.dir().path());
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("layout: dp 1 x pp 2 x tp 2, ZeRO stage 0"), std::string::npos) << inspect.out;
}

}  // namespace
}  // namespace gradmesh::testing
