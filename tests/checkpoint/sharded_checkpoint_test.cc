// Sharded state written by several ranks and committed by one: parts land in
// step-<N>.parts/ and are taken into the checkpoint with their rank and
// shard; a part that fails or never comes fails the save without touching
// earlier checkpoints; the optimizer state of either form reads back as
// pieces of the flat buffer and consolidates, and malformed layouts are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "gradmesh/checkpoint/optimizer_state.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

using gradmesh::testing::TempDir;
using testing::tensor_for;
using testing::trainer_at;

// Rank `rank`'s shard of a flat state of 10 elements over 2 ranks: rank 0
// holds [0, 3) and [6, 8), rank 1 holds [3, 6) and [8, 10).
TensorFile shard_of(int rank, float offset) {
  const std::vector<ElementRange> ranges =
      rank == 0 ? std::vector<ElementRange>{{0, 3}, {6, 2}} : std::vector<ElementRange>{{3, 3}, {8, 2}};
  Tensor values = Tensor::empty({5});
  for (int i = 0; i < 5; ++i) values.data()[i] = offset + static_cast<float>(i);
  return optimizer_shard_file(rank, 2, ranges, {{"exp_avg", values}}, Tensor::full({1}, 7.0f),
                              {{"optimizer", "adamw"}, {"param_names", "w"}});
}

// Rank 0's snapshot: weights, trainer.json and shard 1, waiting for shard 2.
Snapshot committer_snapshot(int64_t step) {
  Snapshot s;
  s.step = step;
  s.world_size = 2;
  s.tensor_files.push_back({"model.safetensors", copy_tensors({{"w", tensor_for(step, {10}, 1)}}), {{"format", "pt"}}, 0});
  s.tensor_files.push_back(shard_of(0, 100));
  s.text_files.emplace_back("trainer.json", trainer_state_json(trainer_at(step)));
  s.parts_from_others.push_back(shard_file_name("optimizer", 2, 2));
  return s;
}

Snapshot part_snapshot(int64_t step) {
  Snapshot s;
  s.step = step;
  s.world_size = 2;
  s.is_part = true;
  s.tensor_files.push_back(shard_of(1, 200));
  return s;
}

CheckpointOptions part_writer(const std::string& dir) { return {dir, 0, /*committer=*/false}; }

TEST(ShardedCheckpoint, PartsOfOtherRanksAreCommittedWithTheirRankAndShard) {
  TempDir dir;
  CheckpointWriter committer({dir.path(), 0});
  CheckpointWriter part(part_writer(dir.path()));
  // The committer usually waits for a part still being written.
  SaveResult committed;
  std::thread rank0([&] { committed = committer.save(committer_snapshot(5)); });
  const SaveResult written = part.save(part_snapshot(5));
  rank0.join();
  ASSERT_TRUE(written.ok) << written.error;
  ASSERT_TRUE(committed.ok) << committed.error;
  EXPECT_FALSE(std::filesystem::exists(dir.file("step-5.parts")));
  const LoadedCheckpoint loaded = verify_checkpoint(dir.file("step-5"));
  const ManifestFile* shard = loaded.manifest.find("optimizer.shard-00002-of-00002.safetensors");
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(shard->rank, 1);
  ASSERT_TRUE(shard->shard.has_value());
  EXPECT_EQ(shard->shard->index, 2);
  EXPECT_EQ(shard->shard->of, "optimizer");

  // Both shards read back as pieces and consolidate to the flat state.
  EXPECT_EQ(optimizer_state_files(loaded),
            (std::vector<std::string>{"optimizer.shard-00001-of-00002.safetensors",
                                      "optimizer.shard-00002-of-00002.safetensors"}));
  const StoredOptimizerState second = read_optimizer_state(loaded, "optimizer.shard-00002-of-00002.safetensors");
  ASSERT_EQ(second.pieces.at("exp_avg").size(), 2u);
  EXPECT_EQ(second.pieces.at("exp_avg")[1].begin, 8);
  const ConsolidatedOptimizerState whole = consolidate_optimizer_state(loaded, 10);
  EXPECT_EQ(whole.optimizer, "adamw");
  EXPECT_EQ(whole.step.item(), 7.0f);
  EXPECT_EQ(whole.values.at("exp_avg").to_vector(),
            (std::vector<float>{100, 101, 102, 200, 201, 202, 103, 104, 203, 204}));
  // A model of another size is named.
  try {
    consolidate_optimizer_state(loaded, 12);
    FAIL() << "consolidated 10 elements as 12";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("covers 10 elements, but the model has 12"), std::string::npos) << e.what();
  }
}

TEST(ShardedCheckpoint, APartThatFailedOrNeverCameFailsTheSaveAndKeepsEarlierCheckpoints) {
  TempDir dir;
  CheckpointWriter committer({dir.path(), 0, true, /*parts_timeout_s=*/0.2});
  CheckpointWriter part(part_writer(dir.path()));
  ASSERT_TRUE(part.save(part_snapshot(1)).ok);
  ASSERT_TRUE(committer.save(committer_snapshot(1)).ok);

  const SaveResult late = committer.save(committer_snapshot(2));  // rank 1 never writes step 2
  EXPECT_FALSE(late.ok);
  EXPECT_NE(late.error.find("'optimizer.shard-00002-of-00002.safetensors' of step 2 did not arrive"),
            std::string::npos)
      << late.error;
  EXPECT_FALSE(std::filesystem::exists(dir.file("step-2.tmp")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("step-2")));

  // The rank's own failure, as its writer leaves it for the committer.
  std::filesystem::create_directories(dir.file("step-3.parts"));
  dir.write("step-3.parts/optimizer.shard-00002-of-00002.safetensors.error", "cannot write: No space left on device");
  const SaveResult failed = committer.save(committer_snapshot(3));
  EXPECT_FALSE(failed.ok);
  EXPECT_NE(failed.error.find("failed: cannot write: No space left on device"), std::string::npos) << failed.error;
  EXPECT_FALSE(std::filesystem::exists(dir.file("step-3.parts")));
  EXPECT_EQ(load_latest(dir.path())->step, 1);
}

TEST(ShardedCheckpoint, OnlyTheCommitterRemovesPartsLeftByACrash) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("step-4.parts"));
  dir.write("step-4.parts/optimizer.shard-00002-of-00002.safetensors", "half");
  CheckpointWriter part(part_writer(dir.path()));
  EXPECT_TRUE(std::filesystem::exists(dir.file("step-4.parts")));
  CheckpointWriter committer({dir.path(), 0});
  EXPECT_FALSE(std::filesystem::exists(dir.file("step-4.parts")));
}

TEST(OptimizerState, RangesTextIsStrict) {
  EXPECT_EQ(ranges_text({{0, 3}, {6, 2}}), "0+3,6+2");
  EXPECT_EQ(parse_ranges("0+3,6+2", "f"), (std::vector<ElementRange>{{0, 3}, {6, 2}}));
  EXPECT_TRUE(parse_ranges("", "f").empty());
  for (const char* bad : {"3", "0+0", "-1+2", "1+x", "1+2,"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_ranges(bad, "f"), Error);
  }
  EXPECT_NO_THROW(check_ranges_tile({{6, 4}, {0, 6}}, 10, "x"));
  EXPECT_THROW(check_ranges_tile({{0, 6}, {5, 5}}, 10, "x"), Error);  // overlap
  EXPECT_THROW(check_ranges_tile({{0, 5}, {6, 4}}, 10, "x"), Error);  // gap
}

TEST(OptimizerState, TheCheckpointHoldsOneFormAndEveryShard) {
  LoadedCheckpoint c;
  c.path = "ckpt/step-1";
  auto with = [&](std::vector<std::string> names) {
    c.manifest.files.clear();
    for (const std::string& name : names) c.manifest.files.push_back({name, 0, "", 0, parse_shard_file_name(name)});
  };
  auto error_of = [&] {
    try {
      optimizer_state_files(c);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      return std::string(e.what());
    }
    return std::string();
  };
  with({"model.safetensors", "optimizer.safetensors"});
  EXPECT_EQ(optimizer_state_files(c), std::vector<std::string>{"optimizer.safetensors"});
  with({"optimizer.shard-00001-of-00003.safetensors", "optimizer.shard-00003-of-00003.safetensors"});
  EXPECT_NE(error_of().find("optimizer shard optimizer.shard-00002-of-00003.safetensors is missing"), std::string::npos);
  with({"optimizer.shard-00001-of-00002.safetensors", "optimizer.shard-00002-of-00003.safetensors"});
  EXPECT_NE(error_of().find("are mixed"), std::string::npos);
  with({"optimizer.safetensors", "optimizer.shard-00001-of-00001.safetensors"});
  EXPECT_NE(error_of().find("holds both"), std::string::npos);
  with({"model.safetensors"});
  EXPECT_NE(error_of().find("holds no optimizer state"), std::string::npos);
}

}  // namespace
}  // namespace gradmesh::checkpoint
