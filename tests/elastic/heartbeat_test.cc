// Heartbeats: the worker's publisher and the launcher's judgement, over a
// real FileStore. The monitor takes "now" as an argument, so hangs are
// judged on given time points, not by sleeping.
#include <gtest/gtest.h>

#include <thread>

#include "gradmesh/comm/file_store.h"
#include "gradmesh/core/error.h"
#include "gradmesh/elastic/heartbeat.h"
#include "gradmesh/elastic/heartbeat_monitor.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace gradmesh::elastic {
namespace {

using Clock = HeartbeatMonitor::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Heartbeat, FormatsAndParses) {
  EXPECT_EQ(format_heartbeat(Heartbeat{12, 3, 40}), "12 3 40");
  const std::optional<Heartbeat> b = parse_heartbeat("-1 7 0");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->step, -1);
  EXPECT_EQ(b->beat, 7);
  for (const char* bad : {"", "1 2", "1 2 3 4", "a 2 3", "1  2 3", "1 -2 3"})
    EXPECT_FALSE(parse_heartbeat(bad)) << bad;
  EXPECT_EQ(heartbeat_key("job", 2, 5), "job/2/heartbeat/5");
}

TEST(HeartbeatPublisher, WritesStepsAndProgress) {
  testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  {
    // An interval no test outlasts: only the constructor can have written.
    HeartbeatPublisher publisher(store, "job", 1, 3, std::chrono::hours(1));
    EXPECT_EQ(parse_heartbeat(store->get("job/1/heartbeat/3"))->beat, 1) << "the first beat is written at once";
  }
  {
    HeartbeatPublisher publisher(store, "job", 1, 3, milliseconds(5));
    publisher.set_step(41);
    publisher.touch();
    // Wait for a beat that carries both calls (the thread writes every 5 ms).
    std::optional<Heartbeat> b;
    for (int i = 0; i < 2000 && !(b && b->progress == 2); ++i) {
      std::this_thread::sleep_for(milliseconds(2));
      b = parse_heartbeat(store->get("job/1/heartbeat/3"));
    }
    ASSERT_TRUE(b);
    EXPECT_EQ(b->step, 41);
    EXPECT_EQ(b->progress, 2);
    EXPECT_GT(b->beat, 1);
  }
}

// What a worker published once (the metrics path) comes back after the
// store lost it, within ten beats.
TEST(HeartbeatPublisher, KeptKeysComeBackWhenTheStoreLosesThem) {
  testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  HeartbeatPublisher publisher(store, "job", 0, 0, milliseconds(5));
  store->set("job/metrics_path", "/runs/a/metrics.jsonl");
  publisher.keep_published("job/metrics_path", "/runs/a/metrics.jsonl");
  ASSERT_TRUE(store->remove("job/metrics_path"));  // as a Redis restart without persistence loses it
  for (int i = 0; i < 2000 && !store->check({"job/metrics_path"}); ++i) std::this_thread::sleep_for(milliseconds(2));
  ASSERT_TRUE(store->check({"job/metrics_path"})) << "the kept key never came back";
  EXPECT_EQ(store->get("job/metrics_path"), "/runs/a/metrics.jsonl");
}

TEST(HeartbeatPublisher, FromEnvironment) {
  testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  {
    testing::ScopedEnv run("GRADMESH_RUN_ID", "");
    EXPECT_EQ(HeartbeatPublisher::from_environment(store), nullptr) << "not started by gradmesh launch";
  }
  testing::ScopedEnv run("GRADMESH_RUN_ID", "envjob");
  testing::ScopedEnv generation("GRADMESH_GENERATION", "2");
  testing::ScopedEnv rank("RANK", "1");
  {
    testing::ScopedEnv interval("GRADMESH_HEARTBEAT_INTERVAL", "0.05");
    EXPECT_NE(HeartbeatPublisher::from_environment(store), nullptr);
    EXPECT_TRUE(store->check({"envjob/2/heartbeat/1"}));
  }
  testing::ScopedEnv interval("GRADMESH_HEARTBEAT_INTERVAL", "0");
  try {
    HeartbeatPublisher::from_environment(store);
    ADD_FAILURE() << "an interval of 0 must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("GRADMESH_HEARTBEAT_INTERVAL"), std::string::npos) << e.what();
  }
}

class MonitorTest : public ::testing::Test {
 protected:
  void beat(int rank, int64_t step, int64_t beat, int64_t progress) {
    store_.set(heartbeat_key("job", 0, rank), format_heartbeat(Heartbeat{step, beat, progress}));
  }
  std::vector<HungWorker> poll(seconds at) { return monitor_.poll(workers_, 0, t0_ + at); }

  testing::TempDir dir_;
  comm::FileStore store_{dir_.path()};
  HeartbeatMonitor monitor_{store_, "job", seconds(5)};
  std::vector<WatchedWorker> workers_{{0, 100, 0}, {1, 101, 0}};
  Clock::time_point t0_ = Clock::now();
};

TEST_F(MonitorTest, WorkersWithoutHeartbeatsAreNeverJudged) {
  EXPECT_TRUE(poll(seconds(0)).empty());
  EXPECT_TRUE(poll(seconds(60)).empty());
  EXPECT_TRUE(poll(seconds(3600)).empty());
}

TEST_F(MonitorTest, StoppedHeartbeatIsNamed) {
  beat(0, 10, 1, 10);
  beat(1, 10, 1, 10);
  EXPECT_TRUE(poll(seconds(0)).empty());
  beat(0, 11, 2, 11);  // rank 0 moves on, rank 1 is frozen
  EXPECT_TRUE(poll(seconds(4)).empty());
  beat(0, 12, 3, 12);
  const std::vector<HungWorker> hung = poll(seconds(5));
  ASSERT_EQ(hung.size(), 1u);
  EXPECT_EQ(hung[0].rank, 1);
  EXPECT_TRUE(hung[0].heartbeat_stopped);
  EXPECT_EQ(describe_hang(hung, seconds(5)), "rank 1 (pid 101) made no progress for 5.0 s (last step 10; heartbeat stopped)");
  EXPECT_EQ(monitor_.last_step(), 12);
}

TEST_F(MonitorTest, BeatsWithoutProgressAreStuckAndTheLowestStepIsNamed) {
  beat(0, 7, 1, 7);
  beat(1, 6, 1, 6);
  EXPECT_TRUE(poll(seconds(0)).empty());
  for (int s = 1; s <= 5; ++s) {  // both keep beating, neither progresses
    beat(0, 7, 1 + s, 7);
    beat(1, 6, 1 + s, 6);
    const std::vector<HungWorker> hung = poll(seconds(s));
    if (s < 5) {
      EXPECT_TRUE(hung.empty()) << s;
      continue;
    }
    ASSERT_EQ(hung.size(), 1u);
    EXPECT_EQ(hung[0].rank, 1) << "rank 1 is behind: the others wait for it";
    EXPECT_FALSE(hung[0].heartbeat_stopped);
    EXPECT_NE(describe_hang(hung, seconds(5)).find("(last step 6; heartbeat continues, progress stalled)"),
              std::string::npos);
  }
}

TEST_F(MonitorTest, TouchCountsAsProgressAndAReplacedWorkerStartsAfresh) {
  beat(1, 3, 1, 3);
  EXPECT_TRUE(poll(seconds(0)).empty());
  beat(1, 3, 2, 4);  // evaluation: no new step, but progress
  EXPECT_TRUE(poll(seconds(4)).empty());
  EXPECT_TRUE(poll(seconds(8)).empty()) << "progress at 4 s resets the clock";
  monitor_.forget(1);
  store_.remove(heartbeat_key("job", 0, 1));
  EXPECT_TRUE(poll(seconds(100)).empty()) << "a replacement is judged after its own first heartbeat";
}

TEST_F(MonitorTest, ReadsTheNewGenerationAfterAnInProcessRecovery) {
  beat(0, 5, 1, 5);
  EXPECT_TRUE(monitor_.poll(workers_, 0, t0_).empty());
  // The survivor re-formed under generation 1 and publishes there now.
  store_.set(heartbeat_key("job", 1, 0), format_heartbeat(Heartbeat{6, 1, 1}));
  EXPECT_TRUE(monitor_.poll(workers_, 1, t0_ + seconds(4)).empty());
  store_.set(heartbeat_key("job", 1, 0), format_heartbeat(Heartbeat{7, 2, 2}));
  EXPECT_TRUE(monitor_.poll(workers_, 1, t0_ + seconds(8)).empty());
  EXPECT_EQ(monitor_.last_step(), 7);
}

}  // namespace
}  // namespace gradmesh::elastic
