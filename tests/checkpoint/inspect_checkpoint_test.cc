// `gradmesh inspect` on checkpoint directories, through the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_fixture.h"
#include "cli/run_command.h"
#include "gradmesh/checkpoint/checkpoint_writer.h"

namespace gradmesh::checkpoint {
namespace {

using gradmesh::testing::CommandResult;
using gradmesh::testing::read_file;
using gradmesh::testing::run_gradmesh;
using gradmesh::testing::TempDir;
using testing::snapshot_at;

TEST(InspectCheckpoint, ListsStepRunAndCheckpointsDirectoriesAndFailsOnAMismatch) {
  TempDir run;
  CheckpointWriter writer({run.file("checkpoints"), 0});
  ASSERT_TRUE(writer.save(snapshot_at(10)).ok);
  ASSERT_TRUE(writer.save(snapshot_at(20)).ok);

  CommandResult r = run_gradmesh("inspect checkpoints/step-10", run.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("step: 10"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checksum ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.weight.exp_avg"), std::string::npos) << r.out;

  for (const char* path : {".", "checkpoints"}) {
    r = run_gradmesh(std::string("inspect ") + path, run.path());
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("newest of 2 checkpoint(s)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step-20"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("step: 20"), std::string::npos) << r.out;
  }

  const std::string model = run.file("checkpoints/step-20/model.safetensors");
  std::string bytes = read_file(model);
  bytes.back() ^= 0x01;
  std::ofstream(model, std::ios::binary | std::ios::trunc) << bytes;
  r = run_gradmesh("inspect .", run.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("model.safetensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CHECKSUM MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0.bias"), std::string::npos) << "the listing is printed anyway\n" << r.out;

  r = run_gradmesh("inspect checkpoints/step-20/model.safetensors", run.path());  // a file: as before
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("0.weight"), std::string::npos) << r.out;

  std::filesystem::create_directory(run.file("empty"));
  r = run_gradmesh("inspect empty", run.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds no checkpoint"), std::string::npos) << r.err;
  r = run_gradmesh("inspect missing-dir", run.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing-dir"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gradmesh::checkpoint
