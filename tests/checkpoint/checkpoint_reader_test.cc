// The loader's distrust: damaged newest checkpoints are skipped with a
// reason and an older one is used; explicit paths must verify.
#include "gradmesh/checkpoint/checkpoint_reader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/checkpoint/checkpoint_writer.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

namespace fs = std::filesystem;
using gradmesh::testing::read_file;
using gradmesh::testing::TempDir;
using testing::expect_checkpoint_holds;
using testing::snapshot_at;

class CheckpointReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CheckpointWriter writer({dir(), 0});
    ASSERT_TRUE(writer.save(snapshot_at(10)).ok);
    ASSERT_TRUE(writer.save(snapshot_at(20)).ok);
  }
  std::string dir() const { return tmp_.file("checkpoints"); }
  std::string newest(const std::string& file) const { return dir() + "/step-20/" + file; }

  // load_latest must fall back to step-10 and say why step-20 was skipped.
  void expect_fallback(const std::vector<std::string>& reason_parts) {
    const std::optional<LoadedCheckpoint> loaded = load_latest(dir());
    ASSERT_TRUE(loaded.has_value());
    expect_checkpoint_holds(*loaded, snapshot_at(10));
    ASSERT_EQ(loaded->skipped.size(), 1u);
    const std::string& line = loaded->skipped[0];
    EXPECT_EQ(line.rfind(dir() + "/step-20: ", 0), 0u) << line;
    for (const std::string& part : reason_parts) EXPECT_NE(line.find(part), std::string::npos) << line;
    // Asked for by name, the damaged checkpoint is an error with the same reason.
    try {
      load_checkpoint(dir() + "/step-20");
      FAIL() << "step-20 verified";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      for (const std::string& part : reason_parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }

  TempDir tmp_;
};

TEST_F(CheckpointReaderTest, TruncatedFileIsSkippedNamingFileAndLength) {
  fs::resize_file(newest("model.safetensors"), fs::file_size(newest("model.safetensors")) - 5);
  expect_fallback({"model.safetensors", "length mismatch", "truncated"});
}

TEST_F(CheckpointReaderTest, OneFlippedBitIsSkippedNamingFileAndChecksum) {
  const std::string path = newest("model.safetensors");
  std::string bytes = read_file(path);
  bytes[bytes.size() - 7] ^= 0x10;  // inside the last tensor's data: still a valid safetensors file
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  expect_fallback({"model.safetensors", "checksum mismatch"});
}

TEST_F(CheckpointReaderTest, MissingManifestIsSkipped) {
  fs::remove(newest("manifest.json"));
  expect_fallback({"manifest.json", "missing"});
}

TEST_F(CheckpointReaderTest, MalformedManifestIsSkippedNamingTheProblem) {
  std::ofstream(newest("manifest.json"), std::ios::trunc) << "{\"format\": \"gradmesh-checkpoint\", \"version\": 1";
  expect_fallback({"manifest.json", "not valid JSON"});
  std::ofstream(newest("manifest.json"), std::ios::trunc)
      << "{\"format\": \"gradmesh-checkpoint\", \"version\": 1, \"step\": 20, \"world_size\": 2, \"files\": []}";
  expect_fallback({"manifest.json", "'created_unix'"});
}

TEST_F(CheckpointReaderTest, MissingListedFileIsSkipped) {
  fs::remove(newest("optimizer.shard-00002-of-00002.safetensors"));
  expect_fallback({"optimizer.shard-00002-of-00002.safetensors", "missing"});
}

TEST_F(CheckpointReaderTest, ManifestOfAnotherStepIsSkipped) {
  fs::remove_all(newest(""));
  fs::copy(dir() + "/step-10", dir() + "/step-20");
  expect_fallback({"records step 10", "step-20"});
}

TEST_F(CheckpointReaderTest, LatestIsOnlyAHint) {
  std::ofstream(dir() + "/latest", std::ios::trunc) << "step-10\n";
  EXPECT_EQ(load_latest(dir())->step, 20);
  fs::remove(dir() + "/latest");
  EXPECT_EQ(load_latest(dir())->step, 20);
}

TEST_F(CheckpointReaderTest, NoneVerifyingIsAFormatErrorListingEveryReason) {
  fs::remove(newest("manifest.json"));
  fs::resize_file(dir() + "/step-10/trainer.json", 3);
  try {
    load_latest(dir());
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    const std::string message = e.what();
    EXPECT_NE(message.find("step-20: manifest.json is missing"), std::string::npos) << message;
    EXPECT_NE(message.find("step-10: trainer.json: length mismatch"), std::string::npos) << message;
  }
}

TEST_F(CheckpointReaderTest, EmptyOrMissingDirectoryHasNoCheckpoint) {
  EXPECT_FALSE(load_latest(tmp_.file("nowhere")).has_value());
  fs::create_directory(tmp_.file("empty"));
  fs::create_directory(tmp_.file("empty/step-3.tmp"));
  EXPECT_FALSE(load_latest(tmp_.file("empty")).has_value());
}

TEST_F(CheckpointReaderTest, LoadCheckpointAcceptsStepCheckpointsAndRunDirectories) {
  EXPECT_EQ(load_checkpoint(dir() + "/step-10").step, 10);
  EXPECT_EQ(load_checkpoint(dir() + "/step-10/").step, 10);
  EXPECT_EQ(load_checkpoint(dir()).step, 20);
  EXPECT_EQ(load_checkpoint(tmp_.path()).step, 20);  // the run directory holding checkpoints/
  for (const std::string& bad : {tmp_.file("nowhere"), dir() + "/latest"}) {
    try {
      load_checkpoint(bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  fs::create_directory(tmp_.file("empty-run"));
  EXPECT_THROW(load_checkpoint(tmp_.file("empty-run")), Error);
}

TEST_F(CheckpointReaderTest, ReadingAFileChangedAfterVerificationFails) {
  const LoadedCheckpoint loaded = load_checkpoint(dir() + "/step-20");
  fs::resize_file(newest("model.safetensors"), 16);
  EXPECT_THROW(loaded.read_tensor_file("model.safetensors"), Error);
  try {
    loaded.read_tensor_file("nothing.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing.safetensors: not in this checkpoint"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointReaderTest, DescribeListsFilesTrainerAndTensorsAndFlagsMismatches) {
  bool verified = false;
  std::string text = describe_checkpoint(dir() + "/step-20", &verified);
  EXPECT_TRUE(verified);
  for (const char* part : {"step: 20", "world size: 2", "model.safetensors", "checksum ok", "shard 2/2 of optimizer",
                           "rng_step: 60", "optimizer: adamw", "0.weight.exp_avg", "0.bias"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
  EXPECT_EQ(text.find("MISMATCH"), std::string::npos) << text;
  std::string bytes = read_file(newest("model.safetensors"));
  bytes.back() ^= 1;
  std::ofstream(newest("model.safetensors"), std::ios::binary | std::ios::trunc) << bytes;
  text = describe_checkpoint(dir() + "/step-20", &verified);
  EXPECT_FALSE(verified);
  EXPECT_NE(text.find("CHECKSUM MISMATCH"), std::string::npos) << text;
  EXPECT_NE(text.find("0.bias"), std::string::npos) << "the listing goes on after a mismatch\n" << text;
}

}  // namespace
}  // namespace gradmesh::checkpoint
