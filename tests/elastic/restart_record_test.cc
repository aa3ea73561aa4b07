// Restart records, the job-wide restart budget and the recovery keys, over a
// real FileStore.
#include <gtest/gtest.h>

#include "gradmesh/comm/file_store.h"
#include "gradmesh/core/error.h"
#include "gradmesh/elastic/restart_budget.h"
#include "gradmesh/elastic/restart_record.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::elastic {
namespace {

std::string format_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected Error(kFormat)";
  return "";
}

TEST(RestartRecord, RoundTripsThroughTheStore) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  EXPECT_FALSE(read_restart_record(store, "run", 0)) << "generation 0 has no record";
  EXPECT_FALSE(read_restart_record(store, "run", 1)) << "no key, no record";
  const RestartRecord written{1, 2, "rank 2 (pid 4242) was killed by signal 9 (SIGKILL)", 137, 1767225600123, 88};
  store.set(restart_record_key("run", 1), restart_record_json(written));
  const std::optional<RestartRecord> read = read_restart_record(store, "run", 1);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->generation, 1);
  EXPECT_EQ(read->failed_rank, 2);
  EXPECT_EQ(read->cause, written.cause);
  EXPECT_EQ(read->exit_code, 137);
  EXPECT_EQ(read->failure_unix_ms, 1767225600123);
  EXPECT_EQ(read->last_step, 88);
}

TEST(RestartRecord, MalformedRecordsNameTheKeyAndTheField) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  const std::string key = restart_record_key("run", 3);
  store.set(key, "{not json");
  std::string what = format_error([&] { read_restart_record(store, "run", 3); });
  EXPECT_NE(what.find("store key 'run/restart/3'"), std::string::npos) << what;
  EXPECT_NE(what.find("not valid JSON"), std::string::npos) << what;

  what = format_error([&] { parse_restart_record("[1, 2]", key); });
  EXPECT_NE(what.find("not a JSON object"), std::string::npos) << what;
  what = format_error([&] {
    parse_restart_record(R"({"generation":3,"failed_rank":1,"cause":7,"exit_code":1,"failure_unix_ms":0,"last_step":-1})",
                         key);
  });
  EXPECT_NE(what.find("field 'cause' is missing or not a string"), std::string::npos) << what;
  what = format_error([&] { parse_restart_record(R"({"generation":3,"failed_rank":1,"cause":"x"})", key); });
  EXPECT_NE(what.find("field 'exit_code' is missing or not an integer"), std::string::npos) << what;
}

TEST(RestartBudget, EveryNodeAgreesOnOneCountPerGeneration) {
  testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  RestartBudget node0(store, "job", 2), node1(store, "job", 2);
  // Both nodes saw generation 0 fail: one restart, counted once.
  EXPECT_EQ(node0.claim(1), 1);
  EXPECT_EQ(node1.claim(1), 1);
  EXPECT_EQ(node1.used(), 1);
  EXPECT_EQ(node1.claim(2), 2);
  EXPECT_EQ(node0.claim(2), 2);
  // The budget is spent: nobody restarts into generation 3, and the count stays at the maximum.
  EXPECT_EQ(node0.claim(3), std::nullopt);
  EXPECT_EQ(node1.claim(3), std::nullopt);
  EXPECT_EQ(node0.used(), 2);
  EXPECT_EQ(budget_exhausted_text(2), "restart budget exhausted (2 of 2 restarts used); giving up");
}

TEST(RestartBudget, FirstRecordWins) {
  testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  RestartBudget budget(store, "job", 1);
  budget.publish_record(RestartRecord{1, 0, "first", 3, 10, 5});
  budget.publish_record(RestartRecord{1, -1, "second", 1, 20, -1});
  EXPECT_EQ(read_restart_record(*store, "job", 1)->cause, "first");
}

TEST(RecoveryKeys, GenerationAndAnnouncement) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  {
    testing::ScopedEnv generation("GRADMESH_GENERATION", "4");
    EXPECT_EQ(read_current_generation(store, "job"), 4) << "absent key: the launch generation";
  }
  write_current_generation(store, "job", 6);
  EXPECT_EQ(read_current_generation(store, "job"), 6);
  store.set("job/generation", "six");
  EXPECT_NE(format_error([&] { read_current_generation(store, "job"); }).find("store key 'job/generation'"),
            std::string::npos);
  EXPECT_FALSE(in_process_recovery_announced(store, "job"));
  announce_in_process_recovery(store, "job");
  EXPECT_EQ(store.get("job/recovery"), "in-process");
  EXPECT_TRUE(in_process_recovery_announced(store, "job"));
}

}  // namespace
}  // namespace gradmesh::elastic

namespace gradmesh::elastic {
namespace {

TEST(RecoveryKeys, SurvivingRanksAfterALostNode) {
  testing::TempDir dir;
  comm::FileStore store(dir.path());
  EXPECT_FALSE(read_surviving_ranks(store, "job", 3).has_value()) << "a generation that kept its world";
  write_surviving_ranks(store, "job", 3, {0, 1, 3});
  write_surviving_ranks(store, "job", 3, {0, 2});  // a later node's list does not replace the first
  EXPECT_EQ(read_surviving_ranks(store, "job", 3), (std::vector<int>{0, 1, 3}));
  for (const char* bad : {"", "0,,1", "0,x", "-1", "0;1"}) {
    store.set("job/4/ranks", bad);
    try {
      read_surviving_ranks(store, "job", 4);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      EXPECT_NE(std::string(e.what()).find("job/4/ranks"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradmesh::elastic
