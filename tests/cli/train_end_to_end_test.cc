// End-to-end on the real Fashion-MNIST files: accuracy, determinism, weights
// in and out. Skips visibly when Debian's dataset-fashion-mnist is missing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "parallel/trained_weights.h"
#include "run_command.h"

namespace gradmesh::testing {
namespace {

std::string only_run_dir(const std::string& runs) {
  std::string found;
  for (const auto& entry : std::filesystem::directory_iterator(runs)) {
    EXPECT_TRUE(found.empty()) << "more than one run directory";
    found = entry.path().string();
  }
  return found;
}

nlohmann::json last_of_type(const std::string& metrics_path, const std::string& type) {
  std::ifstream in(metrics_path);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);  // every line must be valid JSON
    if (j["type"] == type) last = j;
  }
  return last;
}

TEST(EndToEnd, ReferenceMlpOneEpochReachesEightyPercent) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  TempDir dir;
  CommandResult r = run_gradmesh(
      "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set train.threads=1 --set output.dir=runs", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run = only_run_dir(dir.file("runs"));
  const nlohmann::json epoch = last_of_type(run + "/metrics.jsonl", "epoch");
  ASSERT_FALSE(epoch.is_null());
  EXPECT_GE(epoch["test_accuracy"].get<double>(), 0.80);
  const nlohmann::json step = last_of_type(run + "/metrics.jsonl", "step");
  for (const char* key : {"step", "epoch", "loss", "lr", "samples_per_s", "wall_time"})
    EXPECT_TRUE(step.contains(key)) << key;
  EXPECT_EQ(step["step"].get<int>(), 468);  // 60000 // 128 with drop_last, as the PyTorch anchor
  EXPECT_TRUE(std::filesystem::exists(run + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(run + "/config.toml"));
  EXPECT_NE(r.err.find("step 50/468"), std::string::npos) << "progress lines expected when not on a TTY";

  // The saved weights evaluate to the same accuracy.
  CommandResult e = run_gradmesh("eval '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --weights '" + run +
                                     "/model.safetensors'",
                                 dir.path());
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json ev = nlohmann::json::parse(e.out);
  EXPECT_NEAR(ev["test_accuracy"].get<double>(), epoch["test_accuracy"].get<double>(), 1e-9);

  CommandResult i = run_gradmesh("inspect '" + run + "/model.safetensors'", dir.path());
  ASSERT_EQ(i.exit_code, 0) << i.err;
  EXPECT_NE(i.out.find("1.weight"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("[512, 784]"), std::string::npos) << i.out;
}

// Same seed, same bits: tests/train/training_loop_test.cc (TrainingLoop.SameSeed...), in process.

TEST(EndToEnd, InitFromLoadsWeightsAndRejectsMismatches) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  TempDir dir;
  const std::string quick = " --set data.limit_train=512 --set train.max_steps=2 --set train.eval_every_epoch=false";
  // Run a starts from seed 1, so its weights are nowhere near seed 0's initial ones.
  CommandResult r = run_gradmesh(
      "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=a --set train.seed=1" + quick, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One step at a negligible rate leaves the starting weights as they were
  // (to ~1e-12), so the saved weights show where a run started.
  const std::string one_tiny_step = " --set train.max_steps=1 --set optim.lr=1e-12";
  r = run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=b "
                   "--init-from runs/a/model.safetensors" + quick + one_tiny_step,
                   dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read_text(dir.file("runs/b/config.toml")).find("runs/a/model.safetensors"), std::string::npos);
  r = run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=random" + quick +
                       one_tiny_step,
                   dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> init = weights_of(dir.file("runs/a/model.safetensors"));
  const std::vector<float> loaded = weights_of(dir.file("runs/b/model.safetensors"));
  const std::vector<float> random = weights_of(dir.file("runs/random/model.safetensors"));
  ASSERT_EQ(loaded.size(), init.size());
  EXPECT_LE(relative_difference(loaded, init), 1e-6) << "run b did not start from runs/a/model.safetensors";
  EXPECT_GT(relative_difference(loaded, random), 0.1) << "run b looks like a random init";
  r = run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=c --set model.hidden=[256] "
                   "--set train.init_from=runs/a/model.safetensors" + quick,
                   dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("1.weight"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[256, 784]"), std::string::npos) << r.err;
}

TEST(EndToEnd, ExistingRunDirectoryIsNeverOverwritten) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  TempDir dir;
  std::filesystem::create_directories(dir.file("runs/keep"));
  dir.write("runs/keep/model.safetensors", "precious");
  CommandResult r = run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=keep "
                                 "--set data.limit_train=256 --set train.max_steps=1",
                                 dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir.file("runs/keep/model.safetensors")), "precious");
}

}  // namespace
}  // namespace gradmesh::testing
