// The GEMM roofs a run prints at its start: measured once, then read from
// the cache; a damaged cache file is measured again and replaced; "off"
// measures nothing.
#include "gradmesh/train/gemm_roofs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gradmesh/kernels/gemm.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

std::string only_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? "" : files[0];
}

TEST(GemmRoofs, MeasuredOnceThenReadFromTheCache) {
  testing::TempDir dir;
  testing::ScopedEnv cache("GRADMESH_ROOFS_CACHE", dir.path().c_str());
  kernels::set_num_threads(1);
  const GemmRoofs first = gemm_roofs();
  ASSERT_TRUE(first.known);
  EXPECT_EQ(first.threads, 1);
  EXPECT_GT(first.f32_gflops, 0.1);
  EXPECT_GT(first.bf16_gflops, 0.1);
  const std::string file = only_file(dir.path());
  EXPECT_EQ(first.cache, file);
  EXPECT_TRUE(first.note.empty()) << first.note;

  // The record is what the second call returns, without measuring: a value
  // written into the file comes back as it is.
  std::ofstream(file) << "gradmesh gemm roofs 1\nf32 1234.5\nbf16 6789\nmeasured 2026-01-02T03:04Z\n";
  const GemmRoofs second = gemm_roofs();
  EXPECT_EQ(second.f32_gflops, 1234.5);
  EXPECT_EQ(second.bf16_gflops, 6789);
  EXPECT_EQ(second.measured, "2026-01-02T03:04Z");
  const std::string text = describe(second);
  EXPECT_NE(text.find("GEMM roofs on 1 thread: float32 1234 GFLOP/s, bf16 6789 GFLOP/s"), std::string::npos) << text;
  EXPECT_NE(text.find("cached in " + file), std::string::npos) << text;
}

TEST(GemmRoofs, ADamagedCacheIsMeasuredAgainAndReplaced) {
  testing::TempDir dir;
  testing::ScopedEnv cache("GRADMESH_ROOFS_CACHE", dir.path().c_str());
  kernels::set_num_threads(1);
  gemm_roofs();
  const std::string file = only_file(dir.path());
  for (const char* bad : {"", "gradmesh gemm roofs 1\nf32 -3\nbf16 9\nmeasured x\n",
                          "gradmesh gemm roofs 1\nf32 nan\nbf16 9\nmeasured x\n", "something else entirely\n"}) {
    std::ofstream(file) << bad;
    const GemmRoofs again = gemm_roofs();
    EXPECT_NE(again.note.find(file + " does not hold a roof record; measured again"), std::string::npos) << bad;
    EXPECT_GT(again.f32_gflops, 0.1);
    EXPECT_TRUE(gemm_roofs().note.empty()) << "the record was not replaced after: " << bad;
  }
}

TEST(GemmRoofs, OffMeasuresNothing) {
  testing::TempDir dir;
  testing::ScopedEnv cache("GRADMESH_ROOFS_CACHE", "off");
  EXPECT_FALSE(gemm_roofs().known);
}

}  // namespace
}  // namespace gradmesh::train
