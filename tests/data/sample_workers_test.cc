// The loader's sample threads (data/sample_workers.h): every sample runs once
// however the threads share them, and the exception reported is the lowest
// failing sample's, whatever the timing.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/data/sample_workers.h"
#include "support/error_from.h"

namespace gradmesh::data {
namespace {

TEST(SampleWorkers, EverySampleRunsExactlyOnce) {
  for (const int threads : {1, 2, 5}) {
    SampleWorkers workers(threads);
    EXPECT_EQ(workers.threads(), threads);
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{256}, int64_t{1001}}) {
      std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
      workers.run(n, [&](int64_t k) { calls[static_cast<size_t>(k)].fetch_add(1); });
      for (int64_t k = 0; k < n; ++k) ASSERT_EQ(calls[static_cast<size_t>(k)].load(), 1) << threads << " " << n << " " << k;
    }
  }
}

TEST(SampleWorkers, TheLowestFailingSampleIsReportedAndTheNextRoundIsClean) {
  SampleWorkers workers(4);
  for (int round = 0; round < 50; ++round) {
    // Samples 37 and 200 fail; 200 sits in a later chunk and may well fail first.
    try {
      workers.run(256, [&](int64_t k) {
        if (k == 37 || k == 200) throw std::runtime_error("sample " + std::to_string(k));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      ASSERT_EQ(std::string(e.what()), "sample 37") << "round " << round;
    }
    std::atomic<int> ran{0};
    workers.run(64, [&](int64_t) { ran.fetch_add(1); });
    ASSERT_EQ(ran.load(), 64);
  }
}

TEST(SampleWorkers, NoThreadsIsAConfigError) {
  const Error e = gradmesh::testing::error_from([] { SampleWorkers workers(0); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(std::string(e.what()).find("data.workers"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace gradmesh::data
