// Metering and the run's record end to end: a real 2-worker run's usage
// lines (CPU, memory, bytes per backend, dataset and checkpoint bytes) and
// their cost at the configured prices, the totals carried over a resume,
// `gradmesh report` regenerating and comparing runs (and refusing bad input
// without touching the run), and the launcher's /metrics during a run.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "cli/child_processes.h"
#include "cli/run_command.h"
#include "support/temp_dir.h"

namespace gradmesh::testing {
namespace {

using Json = nlohmann::json;

std::vector<Json> metrics_lines(const std::string& path, const std::string& type) {
  std::vector<Json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line);
    if (j["type"] == type) out.push_back(std::move(j));
  }
  return out;
}

// A short metered run: 2 workers over shm, 60 steps, a checkpoint every 30,
// a core-hour priced at 3600 so the compute cost is the core-seconds.
std::string metered_run(const std::string& run_id, int steps, const std::string& extra = "") {
  return "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --nproc-per-node 2 --set train.threads=1"
         " --set output.dir=runs --set output.run_id=" + run_id + " --set train.max_steps=" + std::to_string(steps) +
         " --set train.log_every=20 --set checkpoint.every_steps=30 --set checkpoint.keep_last=0"
         " --set output.trace_steps=0 --set data.limit_test=1000 --set metering.price_per_core_hour=3600"
         " --set metering.price_per_gb_egress=1 " + extra;
}

TEST(Metering, ARunAccountsForWhatItUsedAndPricesIt) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const CommandResult r = run_gradmesh(metered_run("m1", 60), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string metrics = dir.path() + "/runs/m1/metrics.jsonl";
  const std::vector<Json> usage = metrics_lines(metrics, "usage");
  ASSERT_EQ(usage.size(), 4u) << "steps 20, 40, 60 and the end";
  const Json& last = usage.back();
  EXPECT_EQ(last["example_prices"], false) << "a price was set";
  EXPECT_EQ(last["currency"], "USD");
  const Json& totals = last["totals"];
  const double cpu = totals["cpu_seconds"];
  EXPECT_GT(cpu, 0.05);
  EXPECT_NEAR(last["cost"]["compute"].get<double>(), cpu, 1e-9 * cpu) << "3600 per core-hour: 1 per core-second";
  EXPECT_EQ(last["cost"]["egress"], 0.0) << "both workers on this host";
  EXPECT_EQ(totals["inter_host_bytes"], 0.0);
  // Every step all-reduces the MLP's 669,706 gradients (2.68 MB): each rank
  // copies the whole buffer into the segment and out again.
  const double gradient_bytes = 669706.0 * 4;
  EXPECT_GE(last["backends"]["shm"]["sent_bytes"].get<double>(), 2 * 60 * gradient_bytes);
  EXPECT_LT(last["backends"]["shm"]["sent_bytes"].get<double>(), 2 * 70 * gradient_bytes);
  ASSERT_EQ(last["ranks"]["cpu_seconds"].size(), 2u);
  for (const Json& rss : last["ranks"]["peak_rss_bytes"]) EXPECT_GT(rss.get<double>(), 10e6);
  // Both ranks read the same dataset files; rank 0 alone writes the checkpoints.
  const auto& read = last["ranks"]["dataset_read_bytes"];
  EXPECT_GT(read[0].get<double>(), 1e6);
  EXPECT_EQ(read[0], read[1]);
  const auto& written = last["ranks"]["checkpoint_written_bytes"];
  EXPECT_GT(written[0].get<double>(), 2 * gradient_bytes) << "two checkpoints of the weights (and momentum)";
  EXPECT_EQ(written[1], 0.0);
  // What the checkpoints occupy is measured on disk.
  double on_disk = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() + "/runs/m1/checkpoints"))
    if (e.is_regular_file()) on_disk += static_cast<double>(e.file_size());
  EXPECT_EQ(totals["checkpoint_stored_bytes"].get<double>(), on_disk);
  EXPECT_GT(totals["storage_gb_seconds"].get<double>(), 0.0);
  // Totals grow; the summary quotes the final cost.
  EXPECT_LE(usage[0]["totals"]["cpu_seconds"].get<double>(), cpu);
  const std::vector<Json> summary = metrics_lines(metrics, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0]["cost"]["total"], last["cost"]["total"]);
  // Every step line has every rank's phases, for the heatmaps.
  const std::vector<Json> steps = metrics_lines(metrics, "step");
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0]["rank_phase_ms"].size(), 2u);
  EXPECT_EQ(steps[0]["rank_phase_ms"][0].size(), steps[0]["phases"].size());
  EXPECT_EQ(metrics_lines(metrics, "run").size(), 1u);
  // The report the run wrote shows the cost.
  const std::string report = read_text(dir.path() + "/runs/m1/report.html");
  EXPECT_NE(report.find("<h2>Cost</h2>"), std::string::npos);
  EXPECT_NE(report.find("Prices from the run's [metering] config"), std::string::npos);
}

TEST(Metering, AResumedRunContinuesTheTotals) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  ASSERT_EQ(run_gradmesh(metered_run("m2", 40), dir.path()).exit_code, 0);
  const std::string metrics = dir.path() + "/runs/m2/metrics.jsonl";
  const double first = metrics_lines(metrics, "usage").back()["totals"]["cpu_seconds"];
  const CommandResult r = run_gradmesh(metered_run("m2", 80, "--resume auto"), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Json> usage = metrics_lines(metrics, "usage");
  ASSERT_GE(usage.size(), 6u);
  // The first usage line of the resumed process starts from the first process's totals.
  const Json* resumed = nullptr;
  for (const Json& u : usage)
    if (u["step"].get<int>() > 40) {
      resumed = &u;
      break;
    }
  ASSERT_NE(resumed, nullptr);
  EXPECT_GT((*resumed)["totals"]["cpu_seconds"].get<double>(), first);
  EXPECT_LT((*resumed)["ranks"]["cpu_seconds"][0].get<double>(), (*resumed)["totals"]["cpu_seconds"].get<double>() / 2)
      << "per-rank figures are this process's alone";
}

TEST(ReportCommand, RegeneratesAndComparesRunsAndLeavesThemAlone) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  ASSERT_EQ(run_gradmesh(metered_run("a", 40), dir.path()).exit_code, 0);
  ASSERT_EQ(run_gradmesh(metered_run("b", 40, "--set parallel.comm_dtype=bf16"), dir.path()).exit_code, 0);
  const std::string metrics = read_text(dir.path() + "/runs/a/metrics.jsonl");
  std::filesystem::remove(dir.path() + "/runs/a/report.html");
  CommandResult r = run_gradmesh("report runs/a", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("report: runs/a/report.html"), std::string::npos) << r.out;
  const std::string page = read_text(dir.path() + "/runs/a/report.html");
  EXPECT_NE(page.find("Step time per rank over the run"), std::string::npos);
  EXPECT_NE(page.find("<h2>Cost</h2>"), std::string::npos);
  EXPECT_EQ(read_text(dir.path() + "/runs/a/metrics.jsonl"), metrics) << "the record is only read";
  r = run_gradmesh("report runs/a runs/b/metrics.jsonl -o cmp.html", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string cmp = read_text(dir.path() + "/cmp.html");
  EXPECT_NE(cmp.find("A = a, B = b"), std::string::npos);
  EXPECT_NE(cmp.find("B / A"), std::string::npos);
  EXPECT_NE(cmp.find("cost: total"), std::string::npos);

  expect_usage_errors("report", {{"", "runs is required"},
                                 {"no-such-run", "no-such-run: no such run directory"},
                                 {"runs/a runs/b runs/a", "runs: At Most 2 required but received 3"},
                                 {"runs", "runs: has no metrics.jsonl"}},
                      dir.path());
  // A corrupt record: named by file and line, exit 1, the old page kept.
  std::filesystem::copy(dir.path() + "/runs/a", dir.path() + "/runs/bad", std::filesystem::copy_options::recursive);
  std::string lines = metrics;
  const size_t third = lines.find('\n', lines.find('\n') + 1) + 1;
  lines.insert(third, "{\"type\": broken\n");
  std::ofstream(dir.path() + "/runs/bad/metrics.jsonl") << lines;
  const std::string old_page = read_text(dir.path() + "/runs/bad/report.html");
  r = run_gradmesh("report runs/bad", dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("runs/bad/metrics.jsonl:3: not valid JSON"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(dir.path() + "/runs/bad/report.html"), old_page);
}

TEST(MeteringConfig, PricesAreExamplesUntilOneIsSetAndBadOnesAreRefused) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string quick = "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.dir=runs --set "
                            "train.max_steps=2 --set data.limit_test=100 --set output.report=false --set output.run_id=";
  ASSERT_EQ(run_gradmesh(quick + "e1 --set metering.currency=EUR", dir.path()).exit_code, 0);
  const Json usage = metrics_lines(dir.path() + "/runs/e1/metrics.jsonl", "usage").back();
  EXPECT_EQ(usage["example_prices"], true) << "a currency is not a price";
  EXPECT_EQ(usage["currency"], "EUR");
  EXPECT_EQ(usage["prices"]["core_hour"], 0.0425);
  expect_usage_errors(quick + "e2",
                      {{"--set metering.price_per_core_hour=-1", "metering.price_per_core_hour"},
                       {"--set metering.price_per_gb_month=cheap", "metering.price_per_gb_month"},
                       {"--set metering.price_per_byte=1", "metering.price_per_byte"}},
                      dir.path());
}

TEST(DashboardFlags, OffMeansNoServerAndBadValuesAreUsageErrors) {
  TempDir dir;
  const CommandResult off = run_gradmesh("launch --nproc-per-node 1 --dashboard off -- true", dir.path());
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(off.err.find("dashboard at"), std::string::npos) << off.err;
  const CommandResult on = run_gradmesh("launch --nproc-per-node 1 -- true", dir.path());
  EXPECT_EQ(on.exit_code, 0) << on.err;
  EXPECT_TRUE(std::regex_search(on.err, std::regex("dashboard at http://127\\.0\\.0\\.1:[0-9]+/"))) << on.err;
  expect_usage_errors("launch --nproc-per-node 1",
                      {{"--dashboard maybe -- true", "--dashboard: expected on or off, got 'maybe'"},
                       {"--dashboard-port 70000 -- true", "--dashboard-port: expected 0 (a free port) to 65535"},
                       {"--dashboard-port -5 -- true", "--dashboard-port"}},
                      dir.path());
  const CommandResult exposed =
      run_gradmesh("launch --nproc-per-node 1 --dashboard-host 0.0.0.0 -- true", dir.path());
  EXPECT_NE(exposed.err.find("the dashboard has no authentication"), std::string::npos) << exposed.err;
  // A port already taken is named, before any worker starts.
  httplib::Server holder;
  const int taken = holder.bind_to_any_port("127.0.0.1");
  const CommandResult busy =
      run_gradmesh("launch --nproc-per-node 1 --dashboard-port " + std::to_string(taken) + " -- touch ran", dir.path());
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  EXPECT_NE(busy.err.find("dashboard 127.0.0.1:" + std::to_string(taken)), std::string::npos) << busy.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/ran")) << "no worker started";
}

// The agent's endpoints on an address other hosts reach: without a token,
// the launcher warns; with one, it does not (Kubernetes scrapes them so).
TEST(DashboardFlags, AgentEndpointsBeyondTheLoopbackWithoutATokenAreWarnedAbout) {
  TempDir dir;
  const CommandResult open = run_gradmesh("launch --nproc-per-node 1 --dashboard off --agent-port 0 --agent-host 0.0.0.0 -- true",
                                          dir.path());
  EXPECT_EQ(open.exit_code, 0) << open.err;
  EXPECT_NE(open.err.find("listen on 0.0.0.0 without a token"), std::string::npos) << open.err;
  dir.write("token", "s3cret-token-of-the-agent\n");
  ::chmod(dir.file("token").c_str(), 0600);
  const CommandResult closed = run_gradmesh("launch --nproc-per-node 1 --dashboard off --agent-port 0 --agent-host 0.0.0.0 "
                                            "--token-file token -- true", dir.path());
  EXPECT_EQ(closed.exit_code, 0) << closed.err;
  EXPECT_NE(closed.err.find("bearer token required"), std::string::npos) << closed.err;
  EXPECT_EQ(closed.err.find("without a token"), std::string::npos) << closed.err;
}

// The launcher's Prometheus endpoint while a run trains: the run's figures
// per rank, with conventional names. The text is kept in the build tree
// (observability-metrics.txt) as a sample.
TEST(Dashboard, PrometheusShowsTheRunPerRankWhileItTrains) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const pid_t launcher = spawn_launch("--dashboard-port 0", workload("p1", "--set train.max_steps=80"), dir.path(), "launch");
  std::string url;
  for (int i = 0; i < 200 && url.empty(); ++i) {
    std::smatch m;
    const std::string err = read_text(dir.path() + "/launch.err");
    if (std::regex_search(err, m, std::regex("dashboard at (http://127\\.0\\.0\\.1:[0-9]+)/"))) url = m[1];
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(url.empty()) << read_text(dir.path() + "/launch.err");
  httplib::Client client(url);
  std::string text;
  for (int i = 0; i < 400; ++i) {
    if (auto res = client.Get("/metrics"); res && res->status == 200) text = res->body;
    if (text.find("gradmesh_rank_cpu_seconds_total{run_id=") != std::string::npos &&
        text.find("rank=\"1\"") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(wait_exit(launcher, std::chrono::seconds(120)), 0) << read_text(dir.path() + "/launch.err");
  for (const char* expected : {"# TYPE gradmesh_rank_cpu_seconds_total counter", "gradmesh_train_step{run_id=",
                               "gradmesh_rank_phase_seconds_per_step{run_id=", "phase=\"comm\"} ",
                               "gradmesh_rank_sent_bytes_total{", "gradmesh_run_cost_total{",
                               "kind=\"compute\",currency=\"USD\",example=\"true\"}", "gradmesh_agent_phase{"})
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  std::ofstream("observability-metrics.txt") << text;
}

// A page open when a real run ends: the workers start only once the page
// streams, and exit right after their last line (the summary), so the
// launcher returns within milliseconds of the last write. The stream must
// carry every line of metrics.jsonl, then the launcher's `finished`, then
// `end`, as a complete response.
TEST(Dashboard, APageReadsARealRunToItsLastLine) {
  if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string train = "exec '" GRADMESH_BINARY "' train " + workload("end", "--set train.max_steps=40 --set output.report=true");
  const std::string cmd = "cd '" + dir.path() + "' && exec '" GRADMESH_BINARY "' launch --nproc-per-node 2 --dashboard-port 0"
                          " -- sh -c \"while [ ! -e go ]; do sleep 0.01; done; " + train + "\" > launch.out 2> launch.err";
  const pid_t launcher = ::fork();
  if (launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string url;
  for (int i = 0; i < 200 && url.empty(); ++i) {
    std::smatch m;
    const std::string err = read_text(dir.file("launch.err"));
    if (std::regex_search(err, m, std::regex("dashboard at (http://127\\.0\\.0\\.1:[0-9]+)/"))) url = m[1];
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(url.empty()) << read_text(dir.file("launch.err"));
  httplib::Client client(url);
  client.set_read_timeout(std::chrono::seconds(60));
  std::string stream;
  const httplib::Result r = client.Get("/events", [&](const char* data, size_t size) {
    if (stream.empty()) std::ofstream(dir.file("go")) << "";  // the page is open: the run may start
    stream.append(data, size);
    return true;
  });
  EXPECT_EQ(wait_exit(launcher, std::chrono::seconds(120)), 0) << read_text(dir.file("launch.err"));
  ASSERT_TRUE(r) << "the stream was cut: " << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  std::vector<std::string> streamed, written;
  const std::string head = "event: metrics\ndata: ";
  for (size_t at = stream.find(head); at != std::string::npos; at = stream.find(head, at + 1))
    streamed.push_back(stream.substr(at + head.size(), stream.find('\n', at + head.size()) - at - head.size()));
  std::ifstream file(dir.file("runs/end/metrics.jsonl"));
  for (std::string line; std::getline(file, line);) written.push_back(line);
  ASSERT_FALSE(written.empty());
  EXPECT_EQ(Json::parse(written.back())["type"], "summary");
  EXPECT_EQ(streamed, written) << "every line of the file, the summary last";
  const size_t finished = stream.rfind("\"kind\":\"finished\"");
  const size_t end = stream.find("event: end\n");
  ASSERT_NE(finished, std::string::npos) << stream.substr(stream.size() - std::min<size_t>(600, stream.size()));
  ASSERT_NE(end, std::string::npos);
  EXPECT_LT(stream.rfind("event: metrics"), finished);
  EXPECT_LT(finished, end);
}

}  // namespace
}  // namespace gradmesh::testing
