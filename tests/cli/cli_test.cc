// The gradmesh executable, run as a user runs it: help, exit codes, errors.
#include <gtest/gtest.h>

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
