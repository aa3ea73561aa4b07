// MDS sets (data/mds.h, data/sharded_images.h): what is written reads back
// sample for sample across shards, an image set prepared from IDX gives the
// in-memory path's exact floats, a rank reads only its slice's bytes, and
// every kind of damage (truncation, a wrong index, a bad checksum, impossible
// offsets, a hostile file name, random byte flips) is an error naming the
// shard and the sample, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/idx.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/prepare_images.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/data/sharded_images.h"
#include "support/temp_dir.h"

namespace gradmesh::data {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// An IDX file of unsigned bytes with `dims`, filled by `value(i)`.
void write_idx(const std::string& path, const std::vector<int64_t>& dims, int (*value)(int64_t)) {
  std::string bytes = {0, 0, 0x08, static_cast<char>(dims.size())};
  int64_t n = 1;
  for (const int64_t d : dims) {
    n *= d;
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  for (int64_t i = 0; i < n; ++i) bytes.push_back(static_cast<char>(value(i)));
  write_all(path, bytes);
}

int pixel(int64_t i) { return static_cast<int>((i * 37 + i / 7) % 256); }
int label(int64_t i) { return static_cast<int>((i * 3) % 10); }

// 300 images of 1x6x5 in shards of ~2 KiB: several shards, the last one short.
class MdsSet : public ::testing::Test {
 protected:
  void SetUp() override {
    write_idx(dir_.file("images"), {300, 6, 5}, pixel);
    write_idx(dir_.file("labels"), {300}, label);
    prepared_ = prepare_images_from_idx(dir_.file("images"), dir_.file("labels"), set_dir(), 2048);
  }
  std::string set_dir() const { return dir_.file("set"); }
  std::string shard_path(size_t s) const {
    char name[32];
    std::snprintf(name, sizeof name, "shard.%05zu.mds", s);
    return set_dir() + "/" + name;
  }
  // What opening the set and reading every sample throws ("" when nothing).
  std::string read_everything() const {
    try {
      const MdsReader set(set_dir());
      for (int64_t i = 0; i < set.count(); ++i) set.sample(i);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  gradmesh::testing::TempDir dir_;
  PreparedSet prepared_;
};

TEST_F(MdsSet, WhatIsWrittenReadsBackAcrossShards) {
  EXPECT_EQ(prepared_.samples, 300);
  EXPECT_GT(prepared_.shards, 5u);
  const MdsReader set(set_dir());
  ASSERT_EQ(set.count(), 300);
  ASSERT_EQ(set.columns().size(), 2u);
  EXPECT_EQ(set.columns()[0].encoding, "ndarray:uint8:1,6,5");
  EXPECT_EQ(set.columns()[1].encoding, "int");
  const IdxArray images = read_idx(dir_.file("images"));
  for (int64_t i = 0; i < 300; ++i) {
    const std::vector<std::string> v = set.sample(i);
    ASSERT_EQ(v[0], std::string(reinterpret_cast<const char*>(images.values.data()) + i * 30, 30)) << i;
    int64_t y = 0;
    std::memcpy(&y, v[1].data(), 8);
    ASSERT_EQ(y, label(i)) << i;
  }
  for (size_t s = 0; s < set.shards().size(); ++s) EXPECT_EQ(set.verify_shard(s), "") << s;
  // Streaming's layout: n, n + 1 offsets, the shard's config, then the samples; the last offset is the file's end.
  const std::string shard = read_all(shard_path(0));
  uint32_t n = 0, first = 0, last = 0;
  std::memcpy(&n, shard.data(), 4);
  std::memcpy(&first, shard.data() + 4, 4);
  std::memcpy(&last, shard.data() + 4 + 4 * n, 4);
  EXPECT_EQ(last, shard.size());
  EXPECT_EQ(shard.substr(4 + 4 * (n + 1), 1), "{");
  EXPECT_EQ(first - (4 + 4 * (n + 1)), shard.find("}", 4 + 4 * (n + 1)) - (4 + 4 * (n + 1)) + 1);
}

// A shard of 2,500 samples read in a strided order, each sample twice.
TEST(MdsOffsets, EverySampleOfALargeShardReadsBackInAnyOrder) {
  gradmesh::testing::TempDir dir;
  write_idx(dir.file("images"), {2500, 2, 2}, pixel);
  write_idx(dir.file("labels"), {2500}, label);
  prepare_images_from_idx(dir.file("images"), dir.file("labels"), dir.file("set"), 1 << 20);
  const IdxArray images = read_idx(dir.file("images"));
  const MdsReader set(dir.file("set"));
  ASSERT_EQ(set.shards().size(), 1u);
  for (int round = 0; round < 2; ++round)
    for (int64_t k = 0; k < 2500; ++k) {
      const int64_t i = (k * 1023 + round) % 2500;
      const std::vector<std::string> v = set.sample(i);
      ASSERT_EQ(v[0], std::string(reinterpret_cast<const char*>(images.values.data()) + i * 4, 4)) << i;
    }
}

TEST_F(MdsSet, AShardTooSmallForItsOffsetsIsNamed) {
  std::string index = read_all(set_dir() + "/index.json");
  const size_t at = index.find("\"samples\":");
  ASSERT_NE(at, std::string::npos) << index;
  index.insert(at + 10, "99999");
  write_all(set_dir() + "/index.json", index);
  const std::string error = read_everything();
  EXPECT_NE(error.find("shard 0"), std::string::npos) << error;
  EXPECT_NE(error.find("cannot hold the offsets"), std::string::npos) << error;
}

TEST_F(MdsSet, ShardedImagesGiveTheInMemoryPathsExactFloats) {
  const Normalization norm{1.0f / 255, 0.2860f, 0.3530f};
  const ImageDataset whole = load_image_dataset(dir_.file("images"), dir_.file("labels"), norm);
  const ImageSamples memory(whole);
  const ShardedImages sharded(std::make_shared<const MdsReader>(set_dir()), norm, LabelSpace{});
  ASSERT_EQ(sharded.count(), memory.count());
  ASSERT_EQ(sharded.sample_shape(), memory.sample_shape());
  std::vector<float> a(30), b(30);
  int32_t ta = -1, tb = -2;
  for (int64_t i = 0; i < memory.count(); ++i) {
    memory.fill(0, i, a.data(), &ta);
    sharded.fill(0, i, b.data(), &tb);
    ASSERT_EQ(a, b) << i;
    ASSERT_EQ(ta, tb) << i;
  }
  EXPECT_EQ(ShardedImages(std::make_shared<const MdsReader>(set_dir()), norm, LabelSpace{}, 17).count(), 17);
}

TEST_F(MdsSet, EachRankReadsOnlyItsSlice) {
  const MdsReader all(set_dir());
  int64_t whole = 0;
  for (const MdsShardInfo& s : all.shards()) whole += s.bytes;
  for (int world : {2, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      const ShardedImages source(std::make_shared<const MdsReader>(set_dir()), Normalization{}, LabelSpace{});
      BatchLoaderOptions o;
      o.global_batch = 30;
      o.rank = rank;
      o.world = world;
      BatchLoader loader(source, o);
      loader.start_epoch(0);
      Batch batch;
      while (loader.next(batch)) {
      }
      // Its samples (38 bytes each) and their offsets (8 bytes each), plus one 4-byte count per shard.
      const double share = static_cast<double>(source.set().bytes_read()) / static_cast<double>(whole);
      EXPECT_GT(share, 0.8 / world) << rank << " of " << world;
      EXPECT_LT(share, 1.2 / world) << rank << " of " << world;
    }
  }
}

TEST_F(MdsSet, ATruncatedShardIsNamed) {
  const std::string bytes = read_all(shard_path(1));
  write_all(shard_path(1), bytes.substr(0, bytes.size() - 10));
  const std::string error = read_everything();
  EXPECT_NE(error.find("shard.00001.mds"), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

TEST_F(MdsSet, AWrongSampleCountInTheIndexIsNamed) {
  std::string index = read_all(set_dir() + "/index.json");
  const size_t at = index.find("\"samples\":");
  ASSERT_NE(at, std::string::npos) << index;
  index.insert(at + 10, "1");  // e.g. 54 -> 154
  write_all(set_dir() + "/index.json", index);
  const std::string error = read_everything();
  EXPECT_NE(error.find("shard.00000.mds"), std::string::npos) << error;
  EXPECT_NE(error.find("index.json says"), std::string::npos) << error;
}

TEST_F(MdsSet, ABadChecksumIsFoundByVerification) {
  std::string bytes = read_all(shard_path(2));
  bytes[bytes.size() - 20] ^= 0x5a;  // a pixel: the shard still parses
  write_all(shard_path(2), bytes);
  const MdsReader set(set_dir());
  EXPECT_EQ(set.verify_shard(1), "");
  const std::string wrong = set.verify_shard(2);
  EXPECT_NE(wrong.find("index.json says"), std::string::npos) << wrong;
}

TEST_F(MdsSet, ImpossibleOffsetsNameTheShardAndTheSample) {
  std::string bytes = read_all(shard_path(0));
  const uint32_t huge = 0x7fffffff;
  std::memcpy(&bytes[4 + 4 * 3], &huge, 4);  // sample 2's end (and sample 3's start)
  write_all(shard_path(0), bytes);
  const MdsReader set(set_dir());
  try {
    set.sample(2);
    FAIL() << "read impossible offsets";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("shard.00000.mds: sample 2"), std::string::npos) << e.what();
  }
}

TEST_F(MdsSet, AShardNameOutsideTheSetIsRefused) {
  std::string index = read_all(set_dir() + "/index.json");
  const size_t at = index.find("shard.00000.mds");
  index.replace(at, 15, "../../etc/passwd");
  write_all(set_dir() + "/index.json", index);
  const std::string error = read_everything();
  EXPECT_NE(error.find("basename"), std::string::npos) << error;
}

TEST_F(MdsSet, ALabelOutsideTheClassesIsNamed) {
  const ShardedImages three(std::make_shared<const MdsReader>(set_dir()), Normalization{}, LabelSpace{3, "model.classes"});
  std::vector<float> x(30);
  int32_t y = 0;
  three.fill(0, 0, x.data(), &y);  // label 0
  try {
    three.fill(0, 1, x.data(), &y);  // label 3
    FAIL() << "accepted label 3 of 3 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.classes"), std::string::npos) << e.what();
  }
}

TEST_F(MdsSet, PreparingOverASetIsRefused) {
  try {
    prepare_images_from_idx(dir_.file("images"), dir_.file("labels"), set_dir(), 2048);
    FAIL() << "wrote over an existing set";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  }
}

// Random damage to the index and the first shard, many times: every outcome
// is a clean read or a gradmesh::Error, never a crash (the sanitizer runs
// make a wild read or an overflow fail the test).
TEST_F(MdsSet, RandomByteFlipsNeverCrash) {
  const std::string index = read_all(set_dir() + "/index.json"), shard = read_all(shard_path(0));
  std::mt19937 rng(7);
  int errors = 0;
  for (int round = 0; round < 300; ++round) {
    std::string i = index, s = shard;
    std::string& target = round % 3 == 0 ? i : s;
    // Mostly the header (counts and offsets), sometimes anywhere.
    const size_t span = round % 2 ? std::min<size_t>(target.size(), 64) : target.size();
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) target[rng() % span] = static_cast<char>(rng());
    write_all(set_dir() + "/index.json", i);
    write_all(shard_path(0), s);
    errors += !read_everything().empty();
  }
  EXPECT_GT(errors, 50) << "the damage went unnoticed nearly always";
}

}  // namespace
}  // namespace gradmesh::data
