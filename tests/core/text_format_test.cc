// The spellings every layer's messages share; tests elsewhere match whole
// messages built from them, so a change here shows up there too.
#include "gradmesh/core/text_format.h"

#include <gtest/gtest.h>

namespace gradmesh {
namespace {

using std::chrono::milliseconds;

TEST(TextFormat, RankLists) {
  EXPECT_EQ(comma_list({}), "");
  EXPECT_EQ(comma_list({0, 2, 5}), "0, 2, 5");
  EXPECT_EQ(rank_list({3}), "rank 3");
  EXPECT_EQ(rank_list({0, 1, 4}), "ranks 0, 1, 4");
  EXPECT_EQ(rank_list({1, 2}, [](int r) { return std::to_string(r) + " (global rank " + std::to_string(r + 4) + ")"; }),
            "ranks 1 (global rank 5), 2 (global rank 6)");
}

TEST(TextFormat, DtypeLabels) {
  EXPECT_EQ(dtype_label(DType::kF32), "f32");
  EXPECT_EQ(dtype_label(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_label(static_cast<DType>(7)), "dtype 7");
}

TEST(TextFormat, Durations) {
  EXPECT_EQ(seconds_text(milliseconds{300}), "0.3 s");
  EXPECT_EQ(seconds_text(milliseconds{300'000}), "300.0 s");
  EXPECT_EQ(duration_text(milliseconds{999}), "999 ms");
  EXPECT_EQ(duration_text(milliseconds{2'500}), "2.5 s");
  EXPECT_EQ(duration_text(milliseconds{0}), "0 ms");
}

}  // namespace
}  // namespace gradmesh
