// manifest.json, shard file names and step directory names.
#include "gradmesh/checkpoint/manifest.h"

#include <gtest/gtest.h>

#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

Manifest sample_manifest() {
  Manifest m;
  m.step = 40;
  m.world_size = 4;
  m.created_unix = 1764600000;
  m.files.push_back({"model.safetensors", 1234, "0123456789abcdef", 0, std::nullopt});
  m.files.push_back({shard_file_name("optimizer", 3, 4), 99, "fedcba9876543210", 2, ShardInfo{3, 4, "optimizer"}});
  return m;
}

TEST(Manifest, RoundTrip) {
  const Manifest m = sample_manifest();
  const Manifest back = parse_manifest(manifest_json(m), "m.json");
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.created_unix, 1764600000);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[1].path, "optimizer.shard-00003-of-00004.safetensors");
  EXPECT_EQ(back.files[1].xxh64, "fedcba9876543210");
  EXPECT_EQ(back.files[1].rank, 2);
  ASSERT_TRUE(back.files[1].shard.has_value());
  EXPECT_EQ(back.files[1].shard->index, 3);
  EXPECT_EQ(back.files[1].shard->of, "optimizer");
  EXPECT_FALSE(back.files[0].shard.has_value());
  EXPECT_NE(manifest_json(m).find("\"format\": \"gradmesh-checkpoint\""), std::string::npos);
}

void expect_manifest_rejected(const std::string& text, const std::string& needle) {
  try {
    parse_manifest(text, "step-1: manifest.json");
    FAIL() << "accepted " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("step-1: manifest.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Manifest, MalformedIsAFormatErrorNamingTheField) {
  const std::string good = manifest_json(sample_manifest());
  expect_manifest_rejected("{", "not valid JSON");
  expect_manifest_rejected(replaced(good, "gradmesh-checkpoint", "other"), "'format'");
  expect_manifest_rejected(replaced(good, "\"version\": 1", "\"version\": 2"), "'version'");
  expect_manifest_rejected(replaced(good, "\"step\": 40", "\"step\": -4"), "'step'");
  expect_manifest_rejected(replaced(good, "\"world_size\": 4", "\"world_size\": 0"), "'world_size'");
  expect_manifest_rejected(replaced(good, "\"0123456789abcdef\"", "\"0123456789ABCDEF\""), "xxh64");
  expect_manifest_rejected(replaced(good, "\"model.safetensors\"", "\"../model.safetensors\""), "not a plain file name");
  expect_manifest_rejected(replaced(good, "\"model.safetensors\"", "\"optimizer.shard-00003-of-00004.safetensors\""), "twice");
  expect_manifest_rejected(replaced(good, "\"index\": 3", "\"index\": 5"), "'index'");
  expect_manifest_rejected(replaced(good, "\"bytes\": 1234,", ""), "'bytes'");
}

TEST(Manifest, ShardFileNames) {
  EXPECT_EQ(shard_file_name("optimizer", 1, 4), "optimizer.shard-00001-of-00004.safetensors");
  const auto shard = parse_shard_file_name("optimizer.shard-00002-of-00004.safetensors");
  ASSERT_TRUE(shard.has_value());
  EXPECT_EQ(shard->index, 2);
  EXPECT_EQ(shard->count, 4);
  EXPECT_EQ(shard->of, "optimizer");
  for (const char* name : {"model.safetensors", "optimizer.shard-00005-of-00004.safetensors",
                           "optimizer.shard-00000-of-00004.safetensors", ".shard-00001-of-00001.safetensors",
                           "optimizer.shard-1-of-x.safetensors", "optimizer.shard-00001-of-00004.json"}) {
    EXPECT_FALSE(parse_shard_file_name(name).has_value()) << name;
  }
}

TEST(Manifest, StepDirectoryNames) {
  EXPECT_EQ(step_dir_name(120), "step-120");
  EXPECT_EQ(parse_step_dir_name("step-120"), 120);
  EXPECT_EQ(parse_step_dir_name("step-0"), 0);
  for (const char* name : {"step-007", "step-5.tmp", "step-5.old", "step-", "step--1", "step-x", "latest", "Step-5"})
    EXPECT_FALSE(parse_step_dir_name(name).has_value()) << name;
}

}  // namespace
}  // namespace gradmesh::checkpoint
