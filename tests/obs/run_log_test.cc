// metrics.jsonl read back: every line type the report and the dashboard use,
// a run killed mid-line, and malformed files named by file and line.
#include <gtest/gtest.h>

#include <fstream>

#include "gradmesh/core/error.h"
#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/run_log.h"
#include "support/temp_dir.h"

namespace gradmesh::obs {
namespace {

using TempDir = gradmesh::testing::TempDir;

void write_lines(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

const char* const kRun =
    R"({"type":"run","run_id":"r1","model":"mlp","parameters":669706,"world_size":2,"backend":"shm","time":100.0})"
    "\n"
    R"({"type":"step","step":50,"epoch":0,"loss":0.9,"samples_per_s":45000,"data_ms":0.1,"forward_ms":0.5,"backward_ms":1.0,"comm_ms":0.3,"optimizer_ms":0.1,"phases":["data","forward","backward","comm","optimizer"],"rank_phase_ms":[[0.1,0.5,1.0,0.2,0.1],[0.1,0.5,1.0,0.4,0.1]],"time":101.0})"
    "\n"
    R"({"type":"checkpoint","step":50,"time":101.5})"
    "\n"
    R"({"type":"restart","generation":1,"failed_rank":1,"cause":"exit code 1","resumed_at_step":50,"steps_lost":3,"time":104.0})"
    "\n"
    R"({"type":"epoch","epoch":0,"step":100,"test_loss":0.45,"test_accuracy":0.84,"time":105.0})"
    "\n"
    R"({"type":"usage","step":100,"currency":"EUR","example_prices":false,"prices":{"core_hour":0.05,"storage_gb_month":0.02,"egress_gb":0.01},"cost":{"compute":0.001,"storage":0.0,"egress":0.0002},"totals":{"cpu_seconds":72.0,"inter_host_bytes":2e7},"ranks":{"cpu_seconds":[36.0,36.0]},"backends":{"gloo":{"sent_bytes":2e7,"received_bytes":2e7}},"time":105.5})"
    "\n"
    R"({"type":"some_future_type","x":1})"
    "\n"
    R"({"type":"summary","steps":100,"samples_per_s":44000.0,"test_accuracy":0.84,"time":106.0})"
    "\n";

TEST(RunLog, ReadsEveryLineTypeTheReportNeeds) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  write_lines(path, kRun);
  const RunLog log = read_run_log(path);
  EXPECT_EQ(log.run.at("model"), "mlp");
  EXPECT_EQ(log.run.at("world_size"), "2");
  ASSERT_EQ(log.steps.size(), 1u);
  EXPECT_EQ(log.steps[0].step, 50);
  EXPECT_DOUBLE_EQ(log.steps[0].phase_ms[3], 0.3);
  ASSERT_EQ(log.steps[0].rank_phase_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(log.steps[0].rank_phase_ms[1][3], 0.4);
  ASSERT_EQ(log.epochs.size(), 1u);
  EXPECT_DOUBLE_EQ(log.epochs[0].test_accuracy, 0.84);
  ASSERT_TRUE(log.usage.has_value());
  EXPECT_EQ(log.usage->prices.currency, "EUR");
  EXPECT_FALSE(log.usage->prices.examples);
  EXPECT_DOUBLE_EQ(log.usage->cost.total(), 0.0012);
  EXPECT_DOUBLE_EQ(log.usage->total("cpu_seconds"), 72.0);
  EXPECT_DOUBLE_EQ(log.usage->total("absent"), 0.0);
  EXPECT_DOUBLE_EQ(log.usage->backends.at("gloo").at("sent_bytes"), 2e7);
  ASSERT_EQ(log.events.size(), 3u);  // checkpoint, restart, finished
  EXPECT_EQ(log.events[1].kind, RunEvent::Kind::kRestart);
  EXPECT_NE(log.events[1].text.find("rank 1 failed (exit code 1)"), std::string::npos) << log.events[1].text;
  EXPECT_NE(log.events[1].text.find("3 steps trained again"), std::string::npos);
  EXPECT_EQ(log.events[2].kind, RunEvent::Kind::kFinished);
  EXPECT_DOUBLE_EQ(log.first_time, 100.0);
  EXPECT_DOUBLE_EQ(log.summary.at("samples_per_s"), 44000.0);
  EXPECT_EQ(log.cut_off_lines, 0);
}

TEST(RunLog, ALastLineCutOffByAKillIsLeftOut) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  write_lines(path, std::string(kRun) + R"({"type":"step","step":150,"lo)");
  const RunLog log = read_run_log(path);
  EXPECT_EQ(log.cut_off_lines, 1);
  EXPECT_EQ(log.steps.size(), 1u);
}

// The process that resumes a killed run appends after the cut-off line: it
// starts a line of its own, and readers skip the cut-off one wherever it is.
TEST(RunLog, AResumedWriterStartsAfterACutOffLine) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  write_lines(path, std::string(kRun) + R"({"type":"step","step":150,"lo)");
  {
    JsonlWriter writer(path, /*append=*/true);
    writer.write(JsonObject().add("type", "step").add("step", int64_t{200}));
  }
  const RunLog log = read_run_log(path);
  EXPECT_EQ(log.cut_off_lines, 1);
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_EQ(log.steps[1].step, 200);
}

TEST(RunLog, MalformedLinesAreNamedByFileAndLine) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"type\":\"step\"}\nnot json\n{\"type\":\"step\"}\n", ":2: not valid JSON"},
      {"{\"type\":\"step\"}\n[1,2]\n", ":2: expected a JSON object with a string \"type\""},
      {"{\"step\":5}\n", ":1: expected a JSON object with a string \"type\""},
      {"{\"type\":7}\n", ":1: expected a JSON object with a string \"type\""},
      {"x\n", ":1: not valid JSON"},
      {"{\"type\": broken\n", ":1: not valid JSON"},
  };
  for (const auto& [text, message] : cases) {
    write_lines(path, text);
    try {
      read_run_log(path);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      EXPECT_NE(std::string(e.what()).find(path + message), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(read_run_log(dir.path() + "/absent.jsonl"), Error);
}

TEST(RunLog, BlankLinesAndMissingOrMistypedFieldsAreTolerated) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  write_lines(path, "\n{\"type\":\"step\",\"loss\":\"high\",\"rank_phase_ms\":[[\"x\"]]}\n  \n{\"type\":\"epoch\"}\n"
                    "{\"type\":\"usage\",\"example_prices\":\"yes\",\"prices\":[1],\"cost\":5,\"ranks\":{\"cpu_seconds\":7},"
                    "\"processes\":7,\"backends\":[]}\n");
  const RunLog log = read_run_log(path);
  ASSERT_TRUE(log.usage.has_value());
  EXPECT_TRUE(log.usage->prices.examples) << "not a boolean: the cautious reading";
  EXPECT_TRUE(log.usage->ranks.at("cpu_seconds").empty());
  ASSERT_EQ(log.steps.size(), 1u);
  EXPECT_EQ(log.steps[0].loss, 0.0);
  EXPECT_EQ(log.steps[0].rank_phase_ms[0][0], 0.0);
  EXPECT_EQ(log.epochs.size(), 1u);
  EXPECT_EQ(log.steps[0].phase_ms.size(), 5u) << "a step line without phase names gets the trainer's five";
}

TEST(JsonlWriter, EveryLineSaysWhenItWasWritten) {
  TempDir dir;
  const std::string path = dir.path() + "/m.jsonl";
  {
    JsonlWriter writer(path);
    writer.write(JsonObject().add("type", "step").add("step", int64_t{1}));
    writer.write(JsonObject().add("type", "step").add("time", 5.0));
    writer.write(JsonObject().add("type", "usage").add("cost", JsonObject().add("total", 0.5))
                     .add("rows", JsonObject::Table{{1, 2}, {3}}).add("names", std::vector<std::string>{"a", "b"}));
  }
  const RunLog log = read_run_log(path);
  ASSERT_EQ(log.steps.size(), 2u);
  EXPECT_GT(log.steps[0].time, 1.7e9) << "Unix seconds";
  EXPECT_EQ(log.steps[1].time, 5.0) << "a line's own time is kept";
  const std::string text = gradmesh::testing::read_file(path);
  EXPECT_NE(text.find(R"("cost":{"total":0.5})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("rows":[[1.0,2.0],[3.0]])"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("names":["a","b"])"), std::string::npos) << text;
}

}  // namespace
}  // namespace gradmesh::obs
