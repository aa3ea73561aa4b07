// The gradmesh executable, run as a user runs it: help, exit codes, errors.
#include <gtest/gtest.h>

#include "data/idx_files.h"
#include "run_command.h"

namespace gradmesh::testing {
namespace {

TEST(Cli, VersionAndHelp) {
  TempDir dir;
  CommandResult r = run_gradmesh("--version", dir.path());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("gradmesh 0."), std::string::npos) << r.out;
  for (const char* sub : {"", "train ", "eval ", "inspect ", "bench ", "bench gemm ", "docs "}) {
    r = run_gradmesh(std::string(sub) + "--help", dir.path());
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << r.out;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  TempDir dir;
  EXPECT_EQ(run_gradmesh("", dir.path()).exit_code, 2);
  EXPECT_EQ(run_gradmesh("frobnicate", dir.path()).exit_code, 2);
  EXPECT_EQ(run_gradmesh("train", dir.path()).exit_code, 2);  // missing config
  EXPECT_EQ(run_gradmesh("eval cfg.toml", dir.path()).exit_code, 2);  // missing --weights
}

TEST(Cli, ConfigErrorsNameTheKeyAndExitTwo) {
  TempDir dir;
  dir.write("bad.toml", "[optim]\nlr = -1\n");
  CommandResult r = run_gradmesh("train bad.toml", dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("optim.lr"), std::string::npos) << r.err;

  dir.write("typo.toml", "[train]\nepochz = 3\n");
  r = run_gradmesh("train typo.toml", dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("train.epochz"), std::string::npos) << r.err;

  r = run_gradmesh("train missing.toml", dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.toml"), std::string::npos) << r.err;

  dir.write("ok.toml", "");
  r = run_gradmesh("train ok.toml --set model.kind=resnet", dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.kind"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs"))) << "a rejected config must not create a run directory";
}

TEST(Cli, MalformedDatasetIsAClearError) {
  TempDir dir;
  std::filesystem::create_directory(dir.file("data"));
  dir.write("data/train-images-idx3-ubyte.gz", std::string("\x00\x00\x08\x03\x00\x00", 6));  // truncated header
  dir.write("data/train-labels-idx1-ubyte.gz", "");
  dir.write("cfg.toml", "[data]\ndir = \"" + dir.file("data") + "\"\n");
  CommandResult r = run_gradmesh("train cfg.toml", dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("train-images-idx3-ubyte.gz"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
}

// A data directory in Fashion-MNIST's layout holding `count` 4x4 images with
// the given labels (cycled), and a config that trains a tiny MLP on it.
void write_tiny_dataset(const TempDir& dir, int count, const std::vector<uint8_t>& labels) {
  std::filesystem::create_directory(dir.file("data"));
  data::testing::Bytes pixels(static_cast<size_t>(count) * 16);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37);
  data::testing::Bytes label_bytes(static_cast<size_t>(count));
  for (size_t i = 0; i < label_bytes.size(); ++i) label_bytes[i] = labels[i % labels.size()];
  const uint32_t n = static_cast<uint32_t>(count);
  data::testing::write_gz(dir.file("data/train-images-idx3-ubyte.gz"), data::testing::idx_bytes(0x08, {n, 4, 4}, pixels));
  data::testing::write_gz(dir.file("data/train-labels-idx1-ubyte.gz"), data::testing::idx_bytes(0x08, {n}, label_bytes));
  dir.write("tiny.toml", "[model]\nhidden = [8]\n[data]\ndir = \"" + dir.file("data") +
                             "\"\n[train]\nbatch_size = 16\nmax_steps = 2\neval_every_epoch = false\n"
                             "[output]\ndir = \"runs\"\n");
}

TEST(Cli, LabelsOutsideModelClassesAreAnErrorNamingTheFirstOne) {
  TempDir dir;
  std::vector<uint8_t> high(56);
  for (size_t i = 0; i < high.size(); ++i) high[i] = static_cast<uint8_t>(200 + i);  // 200..255
  write_tiny_dataset(dir, 64, high);
  CommandResult r = run_gradmesh("train tiny.toml", dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(dir.file("data/train-labels-idx1-ubyte.gz") +
                       ": label 0 is 200, outside [0, 10) (model.classes = 10)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs"))) << "nothing may be written for a rejected data set";
  // The class count is the config's to declare: 256 classes fit these labels.
  r = run_gradmesh("train tiny.toml --set model.classes=256", dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("trained 2 steps"), std::string::npos) << r.out;
}

TEST(Cli, ARunThatWouldTrainNothingIsAConfigError) {
  TempDir dir;
  write_tiny_dataset(dir, 200, {0, 1, 2, 3});
  CommandResult r = run_gradmesh(
      "train tiny.toml --set data.limit_train=100 --set train.batch_size=128 --set data.drop_last=true", dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("train.batch_size: the run would train 0 steps: 100 training samples (data.limit_train = 100) "
                       "do not fill one global batch of 128 and data.drop_last = true drops the short batch"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("trained 0 steps"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("runs"))) << "a run of 0 steps must leave nothing behind";
}

TEST(Cli, MalformedWeightsAreAClearError) {
  TempDir dir;
  dir.write("garbage.safetensors", "this is not a safetensors file at all");
  CommandResult r = run_gradmesh("inspect garbage.safetensors", dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("garbage.safetensors"), std::string::npos) << r.err;
  r = run_gradmesh("inspect nonexistent.safetensors", dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("nonexistent.safetensors"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gradmesh::testing

namespace gradmesh::testing {
namespace {

// The default corpus is Debian's fortunes (scripts/install-deps.sh installs it).
TEST(Cli, PrepareTextTokenisesTheFortunesCorpus) {
  if (!std::filesystem::exists("/usr/share/games/fortunes/fortunes"))
    GTEST_SKIP() << "Debian's fortunes package is not installed";
  TempDir dir;
  CommandResult r = run_gradmesh("data prepare-text --output tokens --vocab char --val-fraction 0.1", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("validation tokens, vocabulary of"), std::string::npos) << r.out;
  const auto train = std::filesystem::file_size(dir.file("tokens/train.bin"));
  const auto val = std::filesystem::file_size(dir.file("tokens/val.bin"));
  EXPECT_GT(train, 1'000'000u) << "fortunes holds megabytes of text";
  EXPECT_NEAR(static_cast<double>(val) / static_cast<double>(train + val), 0.1, 0.001);
  CommandResult bad = run_gradmesh("data prepare-text --output t2 --input missing.txt", dir.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("missing.txt: does not exist"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("t2"))) << "a failed prepare leaves nothing behind";
  CommandResult usage = run_gradmesh("data prepare-text --output t3 --vocab word", dir.path());
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace gradmesh::testing
