// The failure census that names the ranks missing from a failed gloo
// collective, run against a real file store. The case that matters most is
// survivors failing in different operations: after a peer dies, one survivor
// may already be in all-reduce #7 while the other still waits for #6's last
// piece. Only the dead rank may be named as missing.
#include "gradmesh/comm/gloo/failure_census.h"

#include <gtest/gtest.h>

#include <thread>

#include "gradmesh/comm/file_store.h"
#include "support/temp_dir.h"

namespace gradmesh::comm::gloo_backend {
namespace {

using TempDir = gradmesh::testing::TempDir;

std::vector<int> ranks_of(const std::vector<FailedEarlier>& earlier) {
  std::vector<int> ranks;
  for (const auto& e : earlier) ranks.push_back(e.rank);
  return ranks;
}

TEST(GlooFailureCensus, SurvivorsInNeighbouringOperationsNameOnlyTheDeadRank) {
  TempDir dir;
  FileStore store(dir.path());
  CensusResult ahead;   // rank 0, failed in #7
  CensusResult behind;  // rank 1, failed in #6; rank 2 is dead and writes nothing
  std::thread first([&] { ahead = take_failure_census(store, 7, 0, 3, false, Millis(300)); });
  std::thread second([&] { behind = take_failure_census(store, 6, 1, 3, false, Millis(300)); });
  first.join();
  second.join();

  ASSERT_TRUE(ahead.available);
  EXPECT_EQ(ahead.reached, std::vector<int>({0}));
  EXPECT_EQ(ahead.missing, std::vector<int>({2}));
  ASSERT_EQ(ranks_of(ahead.earlier), std::vector<int>({1}));
  EXPECT_EQ(ahead.earlier[0].seq, 6);

  ASSERT_TRUE(behind.available);
  EXPECT_EQ(behind.reached, std::vector<int>({0, 1}));  // rank 0 went past #6
  EXPECT_EQ(behind.missing, std::vector<int>({2}));
  EXPECT_TRUE(behind.earlier.empty());
}

TEST(GlooFailureCensus, ATimeoutSeenByAPeerInTheSameOperationCounts) {
  TempDir dir;
  FileStore store(dir.path());
  store.set("census/1", "4 timeout");
  const CensusResult result = take_failure_census(store, 4, 0, 2, false, Millis(100));
  ASSERT_TRUE(result.available);
  EXPECT_TRUE(result.any_timed_out);
  EXPECT_EQ(result.reached, std::vector<int>({0, 1}));
  EXPECT_TRUE(result.missing.empty());

  // A timeout in a later operation says nothing about how #3 ended.
  const CensusResult earlier_op = take_failure_census(store, 3, 0, 2, false, Millis(100));
  EXPECT_FALSE(earlier_op.any_timed_out);
  EXPECT_EQ(earlier_op.reached, std::vector<int>({0, 1}));
}

TEST(GlooFailureCensus, AnUnreadableRecordCountsAsNone) {
  TempDir dir;
  FileStore store(dir.path());
  store.set("census/1", "six failed");
  const CensusResult result = take_failure_census(store, 6, 0, 2, false, Millis(100));
  ASSERT_TRUE(result.available);
  EXPECT_EQ(result.missing, std::vector<int>({1}));
}

TEST(GlooFailureCensus, RecordsParseOnlyInTheirOwnForm) {
  int64_t seq = -1;
  bool timed_out = false;
  EXPECT_TRUE(parse_census_record("12 timeout", &seq, &timed_out));
  EXPECT_EQ(seq, 12);
  EXPECT_TRUE(timed_out);
  EXPECT_TRUE(parse_census_record("0 failed", &seq, &timed_out));
  EXPECT_EQ(seq, 0);
  EXPECT_FALSE(timed_out);
  for (const char* bad :
       {"", "12", "12 ", " timeout", "-1 failed", "12 lost", "1x failed", "12 failed ", "12  failed"}) {
    EXPECT_FALSE(parse_census_record(bad, &seq, &timed_out)) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace gradmesh::comm::gloo_backend
