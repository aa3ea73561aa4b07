// What this process consumed: its peak resident set follows what it writes,
// CPU time grows with work, and the byte counters add up.
#include "gradmesh/core/resource_usage.h"

#include <gtest/gtest.h>

#include <vector>

namespace gradmesh {
namespace {

TEST(ResourceUsage, PeakRssIsThisProcesssHighWaterMark) {
  const int64_t before = process_usage().peak_rss_bytes;
  EXPECT_GT(before, 0);
  std::vector<char> touched(64 << 20, 1);  // 64 MiB written: resident
  EXPECT_GE(process_usage().peak_rss_bytes, before + (32 << 20) * (touched[12345] == 1));
}

TEST(ResourceUsage, CpuAndWallTimeGrowWithWork) {
  const ProcessUsage before = process_usage();
  volatile double sink = 0;
  for (int i = 0; i < 50'000'000; ++i) sink = sink + i * 1e-9;
  const ProcessUsage after = process_usage();
  EXPECT_GT(after.cpu_seconds, before.cpu_seconds);
  EXPECT_GT(after.wall_seconds, before.wall_seconds);
}

TEST(ResourceUsage, ByteCountersAddUpPerCounter) {
  const uint64_t read = io_bytes(IoCounter::kDatasetRead), written = io_bytes(IoCounter::kCheckpointWritten);
  count_io(IoCounter::kDatasetRead, 100);
  count_io(IoCounter::kDatasetRead, 23);
  count_io(IoCounter::kCheckpointWritten, 7);
  EXPECT_EQ(io_bytes(IoCounter::kDatasetRead) - read, 123u);
  EXPECT_EQ(io_bytes(IoCounter::kCheckpointWritten) - written, 7u);
}

}  // namespace
}  // namespace gradmesh
