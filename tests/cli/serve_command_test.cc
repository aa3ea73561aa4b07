// gradmesh serve through the real binary: a trained run served under a name,
// answering inference over HTTP with the run's weights, the bearer token
// from a file, the run's step as the version; SIGTERM drains it and it exits
// 0; a large JSON body costs about twice its size and is given back; bad
// arguments are named. Skips visibly without the dataset.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/run_command.h"
#include "elastic/launcher_process.h"

namespace gradmesh::testing {
namespace {

using Json = nlohmann::json;

class ServeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed (" << kDataDir << ")";
  }
  TempDir dir_;
};

TEST_F(ServeCommand, ServesATrainedRunWithItsTokenAndDrainsOnSigterm) {
  const CommandResult trained =
      run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=r1 --set data.limit_train=384"
                   " --set data.limit_test=64 --set output.report=false",
                   dir_.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  dir_.write("token", "tok-123\n");
  LauncherProcess server({"serve", "fashion=" + dir_.file("runs/r1"), "--port", "0", "--token-file", dir_.file("token"),
                          "--max-delay-us", "500"},
                         dir_.path(), "serve");
  const int port = wait_for_listening_port(server);
  ASSERT_GT(port, 0) << server.err();
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  const Json image = {{"inputs", {{{"name", "input"}, {"shape", {1, 784}}, {"datatype", "FP32"},
                                   {"data", std::vector<float>(784, 0.25f)}}}}};
  EXPECT_EQ(c.Post("/v2/models/fashion/infer", image.dump(), "application/json")->status, 401);
  c.set_bearer_token_auth("tok-123");
  const Json meta = Json::parse(c.Get("/v2/models/fashion")->body);
  EXPECT_EQ(meta["versions"], Json({"3"})) << "384 samples in batches of 128: 3 steps, the version";
  auto r = c.Post("/v2/models/fashion/infer", image.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json out = Json::parse(r->body);
  EXPECT_EQ(out["outputs"][0]["shape"], Json({1, 10}));
  const int64_t predicted = out["outputs"][1]["data"][0].get<int64_t>();
  EXPECT_GE(predicted, 0);
  EXPECT_LT(predicted, 10);
  EXPECT_NE(c.Get("/metrics")->body.find("gradmesh_serve_requests_total{model=\"fashion\",status=\"200\"} 1"),
            std::string::npos);
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(std::chrono::milliseconds(20'000)), 0) << server.err();
  EXPECT_NE(server.err().find("SIGTERM: draining"), std::string::npos) << server.err();
}

// Peak and resident memory of the server process, kB (/proc/PID/status).
int64_t status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

// A large JSON request is read in one pass into its tensor: the server's peak
// memory grows by about twice the body (the body, its floats, the batch's
// activations), where a document tree cost fifteen times, and what it used
// is given back afterwards (docs/serve.md, "Memory per request").
TEST_F(ServeCommand, ALargeJsonBodyCostsAboutTwiceItsSizeAndIsGivenBack) {
  const CommandResult trained =
      run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=r1 --set data.limit_train=128"
                   " --set data.limit_test=64 --set output.report=false",
                   dir_.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  LauncherProcess server({"serve", "fashion=" + dir_.file("runs/r1"), "--port", "0", "--max-body-mb", "64"}, dir_.path(),
                         "serve");
  const int port = wait_for_listening_port(server);
  ASSERT_GT(port, 0) << server.err();
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  c.set_write_timeout(60, 0);
  auto body = [](int64_t rows) {
    std::string text = R"({"inputs": [{"name": "input", "shape": [)" + std::to_string(rows) +
                       R"(, 784], "datatype": "FP32", "data": [)";
    for (int64_t i = 0; i < rows * 784; ++i) text += (i ? ",0." : "0.") + std::to_string(100000 + i % 899999);
    return text + "]}]}";
  };
  ASSERT_EQ(c.Post("/v2/models/fashion/infer", body(1), "application/json")->status, 200);
  const int64_t idle_kb = status_kb(server.pid(), "VmRSS");
  { std::ofstream("/proc/" + std::to_string(server.pid()) + "/clear_refs") << "5"; }  // resets the peak
  const std::string large = body(3000);  // about 23 MB
  const auto body_kb = static_cast<int64_t>(large.size() / 1024);
  for (int i = 0; i < 2; ++i) {  // the second too: an allocator may keep what a first large free gave back
    auto r = c.Post("/v2/models/fashion/infer", large, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body.substr(0, 300);
    EXPECT_EQ(Json::parse(r->body)["outputs"][0]["shape"], Json({3000, 10}));
  }
  const int64_t peak_kb = status_kb(server.pid(), "VmHWM"), after_kb = status_kb(server.pid(), "VmRSS");
  EXPECT_LE(peak_kb - idle_kb, 3 * body_kb) << "idle " << idle_kb << " kB, peak " << peak_kb << " kB, body " << body_kb;
  EXPECT_LE(after_kb - idle_kb, body_kb / 4 + 16 * 1024) << "idle " << idle_kb << " kB, after " << after_kb << " kB";
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(std::chrono::milliseconds(20'000)), 0) << server.err();
}

TEST_F(ServeCommand, WatchServesEachNewCheckpointOfTheRun) {
  const std::string train = "train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=r2"
                            " --set data.limit_train=384 --set data.limit_test=64 --set output.report=false"
                            " --set checkpoint.every_steps=1 --set checkpoint.keep_last=2";
  const CommandResult first = run_gradmesh(train, dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  LauncherProcess server({"serve", "m=" + dir_.file("runs/r2"), "--port", "0", "--watch", "--watch-interval", "0.1"},
                         dir_.path(), "watch");
  const int port = wait_for_listening_port(server);
  ASSERT_GT(port, 0) << server.err();
  httplib::Client c("127.0.0.1", port);
  auto version = [&] { return Json::parse(c.Get("/v2/models/m")->body)["versions"][0].get<std::string>(); };
  EXPECT_EQ(version(), "3");
  // A second epoch of the same run: checkpoints 4, 5, 6.
  const CommandResult second = run_gradmesh(train + " --set train.epochs=2 --resume auto", dir_.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  for (int i = 0; i < 100 && version() != "6"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(version(), "6") << server.err();
  EXPECT_NE(server.err().find("m: version "), std::string::npos) << server.err();
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait(std::chrono::milliseconds(20'000)), 0) << server.err();
  const CommandResult nothing = run_gradmesh("serve m=" + dir_.file("runs/r2/model.safetensors") + " --watch --port 0",
                                             dir_.path());
  EXPECT_EQ(nothing.exit_code, 2) << nothing.err;
  EXPECT_NE(nothing.err.find("no checkpoints directory to watch"), std::string::npos) << nothing.err;
}

// --precision bf16 scores the run's test set in both precisions before
// serving, and the answers come from bf16 products: near float32's, and
// not always equal to them.
TEST_F(ServeCommand, Bf16ServingReportsTheAccuracyChangeAndAnswersCloseToFloat32) {
  const CommandResult trained =
      run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=r3 --set data.limit_train=384"
                   " --set data.limit_test=64 --set output.report=false",
                   dir_.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const Json image = {{"inputs", {{{"name", "input"}, {"shape", {2, 784}}, {"datatype", "FP32"},
                                   {"data", [] {
                                      std::vector<float> pixels(2 * 784);
                                      for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 29) / 29.0f;
                                      return pixels;
                                    }()}}}}};
  std::vector<std::vector<float>> logits;
  for (const char* precision : {"fp32", "bf16"}) {
    LauncherProcess server({"serve", "m=" + dir_.file("runs/r3"), "--port", "0", "--precision", precision},
                           dir_.path(), std::string("serve-") + precision);
    const int port = wait_for_listening_port(server);
    ASSERT_GT(port, 0) << server.err();
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(20, 0);
    auto r = c.Post("/v2/models/m/infer", image.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    logits.push_back(Json::parse(r->body)["outputs"][0]["data"].get<std::vector<float>>());
    server.signal(SIGTERM);
    EXPECT_EQ(server.wait(std::chrono::milliseconds(20'000)), 0) << server.err();
    if (std::string(precision) == "bf16") {
      EXPECT_NE(server.err().find("bf16 products: oneDNN on"), std::string::npos) << server.err();
      EXPECT_NE(server.err().find("m in bf16: test accuracy "), std::string::npos) << server.err();
      EXPECT_NE(server.err().find("over 64 targets of its test set"), std::string::npos) << server.err();
    } else {
      EXPECT_EQ(server.err().find("in bf16"), std::string::npos) << server.err();
    }
  }
  ASSERT_EQ(logits[0].size(), 20u);
  ASSERT_EQ(logits[1].size(), 20u);
  EXPECT_NE(logits[0], logits[1]) << "bf16 products round";
  float largest = 0;
  for (const float v : logits[0]) largest = std::max(largest, std::abs(v));
  // Three products of 8-bit operands: within a few percent of the largest output.
  for (size_t i = 0; i < logits[0].size(); ++i) EXPECT_NEAR(logits[1][i], logits[0][i], 0.03f * largest + 0.01f) << i;
  const CommandResult bad = run_gradmesh("serve m=" + dir_.file("runs/r3") + " --precision fp16 --port 0", dir_.path());
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--precision"), std::string::npos) << bad.err;
}

TEST_F(ServeCommand, BadArgumentsAreNamed) {
  const CommandResult missing = run_gradmesh("serve runs/none --port 0", dir_.path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("runs/none"), std::string::npos) << missing.err;
  const CommandResult no_model = run_gradmesh("serve", dir_.path());
  EXPECT_EQ(no_model.exit_code, 2) << no_model.err;
  const CommandResult bad_port = run_gradmesh("serve runs/none --port 70000", dir_.path());
  EXPECT_EQ(bad_port.exit_code, 2) << bad_port.err;
  const CommandResult bad_name = run_gradmesh("serve 'a b=runs/none' --port 0", dir_.path());
  EXPECT_EQ(bad_name.exit_code, 2) << bad_name.err;
  EXPECT_NE(bad_name.err.find("model name 'a b'"), std::string::npos) << bad_name.err;
}

}  // namespace
}  // namespace gradmesh::testing
