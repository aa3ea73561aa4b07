// Hot reload: while clients keep sending requests, a new `latest` in the
// watched checkpoints directory swaps the model; no request fails, each
// response names the version that answered it, and the answers are the new
// model's from then on. A checkpoint that fails to load leaves the old
// version serving, and the failure is counted.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/serve/inference_server.h"
#include "support/temp_dir.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

std::unique_ptr<nn::Model> seeded_tiny_model(uint64_t seed) {
  nn::MlpSpec spec;
  spec.in_features = 4;
  spec.hidden = {8};
  spec.classes = 3;
  return std::make_unique<nn::Model>(nn::build_mlp(spec), seed);
}

// "…/step-<N>" -> a model of version N with seed N; "step-13" fails to load.
std::shared_ptr<ServedModel> load(const std::string& step_dir) {
  const std::string step = std::filesystem::path(step_dir).filename().string().substr(5);
  if (step == "13") throw_error(ErrorKind::kFormat, step_dir, "the checkpoint is corrupt");
  return std::make_shared<ServedModel>("tiny", step, ModelShape{"mlp", {1, 2, 2}, 3},
                                       seeded_tiny_model(static_cast<uint64_t>(std::stoll(step))));
}

std::string body() {
  return Json{{"inputs", {{{"name", "input"}, {"shape", {1, 4}}, {"datatype", "FP32"}, {"data", {1, 2, 3, 4}}}}}}
      .dump();
}

std::vector<float> logits_of(uint64_t seed) {
  auto m = seeded_tiny_model(seed);
  autograd::NoGradGuard no_grad;
  m->set_training(false);
  return m->forward(autograd::Variable(Tensor::from_vector({1, 1, 2, 2}, {1, 2, 3, 4}))).value().to_vector();
}

TEST(HotReload, ANewLatestSwapsTheModelWithoutFailingARequest) {
  gradmesh::testing::TempDir dir;
  ServerOptions o;
  o.port = 0;
  InferenceServer server({std::make_shared<ServedModel>("tiny", "1", ModelShape{"mlp", {1, 2, 2}, 3}, seeded_tiny_model(1))},
                         o);
  server.watch("tiny", dir.path(), load, 0.02);
  server.start_watching();
  const int port = server.bind();
  std::thread serving([&] { server.run(); });

  std::atomic<bool> done{false};
  std::atomic<int> failed{0};
  std::mutex mutex;
  std::set<std::string> versions;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", port);
    while (!done) {
      auto r = c.Post("/v2/models/tiny/infer", body(), "application/json");
      if (!r || r->status != 200) {
        ++failed;
        continue;
      }
      std::lock_guard<std::mutex> lock(mutex);
      versions.insert(Json::parse(r->body)["model_version"].get<std::string>());
    }
  });
  httplib::Client c("127.0.0.1", port);
  auto version_now = [&] { return Json::parse(c.Get("/v2/models/tiny")->body)["versions"][0].get<std::string>(); };
  auto wait_for = [&](const std::string& v) {
    for (int i = 0; i < 500 && version_now() != v; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return version_now();
  };
  // The swap comes after the client has been answered by version 1.
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!versions.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  dir.write("latest", "step-2\n");
  EXPECT_EQ(wait_for("2"), "2");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // The new version answers with its own weights (within 1e-5: the request
  // may share a matrix product with the other client's).
  const Json out = Json::parse(c.Post("/v2/models/tiny/infer", body(), "application/json")->body);
  EXPECT_EQ(out["model_version"], "2");
  const std::vector<float> expected = logits_of(2);
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(out["outputs"][0]["data"][i].get<double>(), expected[i], 1e-5 * (1 + std::fabs(expected[i])));
  // A checkpoint that does not load: version 2 goes on serving.
  dir.write("latest", "step-13\n");
  for (int i = 0; i < 500 && server.metrics_text().find("result=\"failed\"") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(version_now(), "2");
  done = true;
  client.join();
  EXPECT_EQ(failed.load(), 0) << "no request failed across the swap";
  EXPECT_EQ(versions, (std::set<std::string>{"1", "2"}));
  const std::string metrics = server.metrics_text();
  EXPECT_NE(metrics.find("gradmesh_serve_reloads_total{model=\"tiny\",result=\"ok\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gradmesh_serve_reloads_total{model=\"tiny\",result=\"failed\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("gradmesh_serve_model_info{model=\"tiny\",version=\"2\"} 1"), std::string::npos);
  EXPECT_EQ(metrics.find("version=\"1\""), std::string::npos) << "the replaced version is no longer exported";
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace gradmesh::serve
