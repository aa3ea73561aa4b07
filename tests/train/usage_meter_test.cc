// The meter's totals are the run's whatever processes it took: each process
// counted from where the meter last saw it, a replaced process's figures
// kept, a meter started later (a resume, a new rank 0) continuing from the
// file without counting anything twice; and the usage line's encoding
// travels between ranks intact.
#include "gradmesh/train/usage_meter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/run_log.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

using TempDir = gradmesh::testing::TempDir;

RankUsage usage_of(const std::string& process, double cpu, double sent, double wall = 1) {
  RankUsage u;
  u.process = process, u.cpu_seconds = cpu, u.sent_bytes = sent, u.wall_seconds = wall, u.peak_rss_bytes = 1e8;
  u.backends["gloo"] = {sent, sent};
  return u;
}

obs::UsageRecord written(const std::string& path, UsageMeter& meter, int64_t step, const std::vector<RankUsage>& ranks,
                         double now) {
  {
    obs::JsonlWriter writer(path, /*append=*/true);
    writer.write(meter.line(step, ranks, now));
  }
  return *obs::read_run_log(path).usage;
}

TEST(UsageMeter, EachProcessIsCountedOnceAcrossRecoveriesAndNewMeters) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  obs::Prices prices;
  prices.core_hour = 3600;  // 1 per core-second
  UsageMeter meter(prices, dir.path() + "/checkpoints", "", 0);
  // Two processes, seen twice: the totals are their latest figures.
  written(path, meter, 10, {usage_of("a", 1, 100), usage_of("b", 2, 200)}, 1);
  obs::UsageRecord u = written(path, meter, 20, {usage_of("a", 3, 300, 2), usage_of("b", 4, 400, 2)}, 2);
  EXPECT_DOUBLE_EQ(u.total("cpu_seconds"), 7);
  EXPECT_DOUBLE_EQ(u.total("sent_bytes"), 700);
  EXPECT_DOUBLE_EQ(u.total("wall_seconds"), 2) << "side by side: the longest rank";
  EXPECT_DOUBLE_EQ(u.cost.compute, 7);
  ASSERT_EQ(u.processes.size(), 2u);
  // b dies and is replaced by c (in-process recovery): b's figures stay.
  u = written(path, meter, 30, {usage_of("a", 5, 500, 3), usage_of("c", 1, 50, 0.5)}, 3);
  EXPECT_DOUBLE_EQ(u.total("cpu_seconds"), 5 + 4 + 1);
  EXPECT_DOUBLE_EQ(u.total("sent_bytes"), 500 + 400 + 50);
  EXPECT_DOUBLE_EQ(u.backends.at("gloo").at("sent_bytes"), 950);
  // a dies; c becomes rank 0 and starts a meter of its own from the file: c's
  // figures so far are already in the totals.
  UsageMeter later(prices, dir.path() + "/checkpoints", path, 3);
  u = written(path, later, 40, {usage_of("c", 2, 80, 1.5), usage_of("d", 1, 10, 0.2)}, 4);
  EXPECT_DOUBLE_EQ(u.total("cpu_seconds"), 10 + 1 + 1);
  EXPECT_DOUBLE_EQ(u.total("sent_bytes"), 950 + 30 + 10);
  EXPECT_DOUBLE_EQ(u.total("wall_seconds"), 3 + 1);
  EXPECT_DOUBLE_EQ(u.cost.compute, 12);
  // A resumed run: all new processes, counted whole.
  UsageMeter resumed(prices, dir.path() + "/checkpoints", path, 10);
  u = written(path, resumed, 50, {usage_of("e", 2, 20, 5)}, 11);
  EXPECT_DOUBLE_EQ(u.total("cpu_seconds"), 14);
  EXPECT_DOUBLE_EQ(u.total("wall_seconds"), 9);
}

TEST(UsageMeter, StorageAccruesForTheBytesKeptWhileTheyAreKept) {
  TempDir dir;
  const std::string checkpoints = dir.path() + "/checkpoints";
  std::filesystem::create_directories(checkpoints + "/step-1");
  {
    std::ofstream(checkpoints + "/step-1/model.safetensors") << std::string(1000, 'x');
  }
  obs::Prices prices;
  prices.storage_gb_month = obs::kSecondsPerBillingMonth * 1e6;  // 1 per kB-second
  UsageMeter meter(prices, checkpoints, "", 100);
  obs::JsonlWriter writer(dir.path() + "/m.jsonl");
  writer.write(meter.line(1, {usage_of("a", 0, 0)}, 110));  // 1 kB for 10 s
  EXPECT_NEAR(meter.cost().storage, 10, 1e-9);
  EXPECT_EQ(directory_bytes(checkpoints), 1000);
  EXPECT_EQ(directory_bytes(dir.path() + "/absent"), 0);
}

TEST(UsageMeter, ThisProcessMeasuresItselfWithAnIdOfItsOwn) {
  const RankUsage u = measure_rank_usage();
  EXPECT_GT(u.cpu_seconds, 0);
  EXPECT_GT(u.peak_rss_bytes, 0);
  EXPECT_EQ(u.process.find(' '), std::string::npos);
  EXPECT_EQ(std::count(u.process.begin(), u.process.end(), ':'), 2) << u.process;
  EXPECT_EQ(measure_rank_usage().process, u.process) << "stable for the process's life";
  // One process, no group: the gather is the identity.
  const std::vector<RankUsage> all = gather_rank_usage(nullptr, u);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].process, u.process);
}

}  // namespace
}  // namespace gradmesh::train
