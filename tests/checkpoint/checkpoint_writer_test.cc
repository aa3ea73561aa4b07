// The commit protocol's results on a real directory: round trips, pruning,
// `latest`, replacing a step, leftovers of crashed saves, the pause knob.
#include "gradmesh/checkpoint/checkpoint_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/core/error.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

namespace fs = std::filesystem;
using gradmesh::testing::read_file;
using gradmesh::testing::ScopedEnv;
using gradmesh::testing::TempDir;
using testing::expect_checkpoint_holds;
using testing::snapshot_at;

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

TEST(CheckpointWriter, SaveThenLoadLatestIsBitExact) {
  TempDir tmp;
  const std::string dir = tmp.file("checkpoints");
  CheckpointWriter writer({dir, 3});
  const Snapshot snapshot = snapshot_at(5);
  const SaveResult result = writer.save(snapshot);
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_EQ(result.path, dir + "/step-5");
  EXPECT_GT(result.bytes, 0);

  const std::optional<LoadedCheckpoint> loaded = load_latest(dir);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->path, dir + "/step-5");
  EXPECT_TRUE(loaded->skipped.empty());
  expect_checkpoint_holds(*loaded, snapshot);
  EXPECT_EQ(loaded->read_text_file("trainer.json"), snapshot.text_files[0].second);
  EXPECT_EQ(entries(dir + "/step-5"),
            (std::set<std::string>{"model.safetensors", "optimizer.shard-00001-of-00002.safetensors",
                                   "optimizer.shard-00002-of-00002.safetensors", "trainer.json", "manifest.json"}));
  EXPECT_EQ(read_file(dir + "/latest"), "step-5\n");
}

TEST(CheckpointWriter, ManifestRecordsLengthsChecksumsRanksAndShards) {
  TempDir tmp;
  CheckpointWriter writer({tmp.path(), 0});
  ASSERT_TRUE(writer.save(snapshot_at(3)).ok);
  const Manifest m = parse_manifest(read_file(tmp.file("step-3/manifest.json")), "manifest.json");
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_GT(m.created_unix, 0);
  ASSERT_EQ(m.files.size(), 4u);
  for (const ManifestFile& file : m.files) {
    EXPECT_EQ(file.bytes, fs::file_size(tmp.file("step-3/" + file.path))) << file.path;
    EXPECT_EQ(file.xxh64.size(), 16u);
  }
  const ManifestFile* shard = m.find("optimizer.shard-00002-of-00002.safetensors");
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(shard->rank, 1);
  ASSERT_TRUE(shard->shard.has_value());
  EXPECT_EQ(shard->shard->index, 2);
  EXPECT_EQ(shard->shard->count, 2);
  EXPECT_EQ(shard->shard->of, "optimizer");
  EXPECT_FALSE(m.find("model.safetensors")->shard.has_value());
}

TEST(CheckpointWriter, KeepLastPrunesOldestAndLatestNamesNewest) {
  TempDir tmp;
  CheckpointWriter writer({tmp.path(), 2});
  for (int64_t step : {10, 20, 30, 40}) {
    ASSERT_TRUE(writer.save(snapshot_at(step)).ok);
    EXPECT_EQ(read_file(tmp.file("latest")), "step-" + std::to_string(step) + "\n");
  }
  EXPECT_EQ(entries(tmp.path()), (std::set<std::string>{"step-30", "step-40", "latest"}));
  EXPECT_EQ(load_latest(tmp.path())->step, 40);
}

TEST(CheckpointWriter, KeepLastZeroKeepsAll) {
  TempDir tmp;
  CheckpointWriter writer({tmp.path(), 0});
  for (int64_t step : {1, 2, 3, 4}) ASSERT_TRUE(writer.save(snapshot_at(step)).ok);
  EXPECT_EQ(list_checkpoints(tmp.path()).size(), 4u);
}

TEST(CheckpointWriter, PruningNeverDeletesTheCheckpointJustWritten) {
  // A run resumed from step-20 (say step-30 was picked by hand as bad) writes
  // step-25 while step-30 still exists: keep_last 1 must keep step-25.
  TempDir tmp;
  CheckpointWriter writer({tmp.path(), 1});
  ASSERT_TRUE(writer.save(snapshot_at(30)).ok);
  ASSERT_TRUE(writer.save(snapshot_at(25)).ok);
  EXPECT_TRUE(fs::exists(tmp.file("step-25")));
  EXPECT_EQ(read_file(tmp.file("latest")), "step-25\n");
}

TEST(CheckpointWriter, SavingAnExistingStepReplacesIt) {
  TempDir tmp;
  CheckpointWriter writer({tmp.path(), 0});
  ASSERT_TRUE(writer.save(snapshot_at(8, 12)).ok);
  const Snapshot bigger = snapshot_at(8, 40);
  ASSERT_TRUE(writer.save(bigger).ok);
  const LoadedCheckpoint loaded = load_checkpoint(tmp.file("step-8"));
  expect_checkpoint_holds(loaded, bigger);
  EXPECT_EQ(entries(tmp.path()), (std::set<std::string>{"step-8", "latest"}));
}

TEST(CheckpointWriter, ConstructionCleansWhatCrashedSavesLeft) {
  TempDir tmp;
  {
    CheckpointWriter writer({tmp.path(), 0});
    ASSERT_TRUE(writer.save(snapshot_at(1)).ok);
    ASSERT_TRUE(writer.save(snapshot_at(2)).ok);
  }
  // A crash mid-save of step 3, a crash while replacing step-2 (after moving
  // it aside, before the rename), and an interrupted `latest` replacement.
  fs::create_directory(tmp.file("step-3.tmp"));
  tmp.write("step-3.tmp/model.safetensors", "partial");
  fs::rename(tmp.file("step-2"), tmp.file("step-2.old"));
  tmp.write("latest.tmp.123.0", "step-");
  tmp.write("notes.txt", "not ours");
  CheckpointWriter writer({tmp.path(), 0});
  EXPECT_EQ(entries(tmp.path()), (std::set<std::string>{"step-1", "step-2", "latest", "notes.txt"}));
  EXPECT_EQ(load_latest(tmp.path())->step, 2);
}

TEST(CheckpointWriter, CreatesTheDirectoryOrFailsNamingIt) {
  TempDir tmp;
  CheckpointWriter nested({tmp.file("a/b/checkpoints"), 1});
  EXPECT_TRUE(fs::is_directory(tmp.file("a/b/checkpoints")));
  tmp.write("plain-file", "x");
  try {
    CheckpointWriter writer({tmp.file("plain-file/checkpoints"), 1});
    FAIL() << "constructed under a regular file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("plain-file/checkpoints"), std::string::npos) << e.what();
  }
}

TEST(CheckpointWriter, InvalidSnapshotFailsWithoutThrowingOrLeavingTmp) {
  TempDir tmp;
  CheckpointWriter writer({tmp.path(), 0});
  Snapshot bad = snapshot_at(4);
  bad.text_files.emplace_back("model.safetensors", "clash");
  SaveResult result = writer.save(bad);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("model.safetensors"), std::string::npos) << result.error;
  bad = snapshot_at(4);
  bad.text_files.emplace_back("../escape", "x");
  result = writer.save(bad);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.error.find("../escape"), std::string::npos) << result.error;
  EXPECT_TRUE(entries(tmp.path()).empty());
}

TEST(CheckpointWriter, PauseKnobIsParsedStrictly) {
  TempDir tmp;
  for (const char* bad : {"files", "files:", "rename:x", "nowhere:1", "latest:-1", ":3", "manifest:1e9"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env("GRADMESH_CHECKPOINT_PAUSE", bad);
    try {
      CheckpointWriter writer({tmp.path(), 1});
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("GRADMESH_CHECKPOINT_PAUSE"), std::string::npos) << e.what();
    }
  }
  ScopedEnv env("GRADMESH_CHECKPOINT_PAUSE", "latest:0");
  CheckpointWriter writer({tmp.path(), 1});
  EXPECT_TRUE(writer.save(snapshot_at(1)).ok);
}

}  // namespace
}  // namespace gradmesh::checkpoint
