// The background writer: every queued snapshot lands, failures are counted
// and logged but never thrown, and destruction waits for the save in flight.
#include "gradmesh/checkpoint/async_checkpoint_writer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

namespace fs = std::filesystem;
using gradmesh::testing::TempDir;
using testing::expect_checkpoint_holds;
using testing::snapshot_at;

TEST(AsyncCheckpointWriter, SavesInARowAllLand) {
  TempDir tmp;
  AsyncCheckpointWriter writer({tmp.path(), 0});
  for (int64_t step = 1; step <= 5; ++step) writer.save(snapshot_at(step, 5000));
  writer.wait();
  const CheckpointStats stats = writer.stats();
  EXPECT_EQ(stats.saved, 5);
  EXPECT_EQ(stats.failed, 0);
  EXPECT_GT(stats.bytes, 5 * 5000 * 4);
  EXPECT_EQ(stats.last_path, tmp.path() + "/step-5");
  EXPECT_TRUE(stats.last_error.empty());
  const std::vector<std::string> found = list_checkpoints(tmp.path());
  ASSERT_EQ(found.size(), 5u);
  for (int64_t step = 1; step <= 5; ++step) {
    expect_checkpoint_holds(load_checkpoint(tmp.path() + "/step-" + std::to_string(step)), snapshot_at(step, 5000));
  }
}

TEST(AsyncCheckpointWriter, DestructionWaitsForTheSaveInFlight) {
  TempDir tmp;
  {
    AsyncCheckpointWriter writer({tmp.path(), 0});
    writer.save(snapshot_at(1, 50'000));
    writer.save(snapshot_at(2, 50'000));
  }
  EXPECT_EQ(load_latest(tmp.path())->step, 2);
  EXPECT_EQ(list_checkpoints(tmp.path()).size(), 2u);
}

TEST(AsyncCheckpointWriter, FailuresAreCountedNotThrown) {
  TempDir tmp;
  const std::string dir = tmp.file("checkpoints");
  AsyncCheckpointWriter writer({dir, 0});
  // The directory turns into a regular file under the writer's feet: every
  // save fails at its first mkdir.
  fs::remove_all(dir);
  tmp.write("checkpoints", "not a directory");
  writer.save(snapshot_at(1));
  writer.save(snapshot_at(2));
  writer.wait();
  CheckpointStats stats = writer.stats();
  EXPECT_EQ(stats.saved, 0);
  EXPECT_EQ(stats.failed, 2);
  EXPECT_NE(stats.last_error.find(dir + "/step-2"), std::string::npos) << stats.last_error;

  fs::remove(dir);
  fs::create_directory(dir);
  writer.save(snapshot_at(3));
  writer.wait();
  stats = writer.stats();
  EXPECT_EQ(stats.saved, 1);
  EXPECT_EQ(stats.failed, 2);
  expect_checkpoint_holds(*load_latest(dir), snapshot_at(3));
}

}  // namespace
}  // namespace gradmesh::checkpoint
