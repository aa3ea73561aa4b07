// The inference server over real HTTP on loopback: health, metadata and
// readiness; inference through dynamic batching answers exactly what the
// model computes, for many concurrent clients; every malformed request gets
// a 4xx with the protocol's JSON error naming the problem; the bearer token
// guards everything but health; /metrics counts what happened; stop()
// drains.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/serve/inference_server.h"
#include "serve/tiny_classifier.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

// A tiny classifier: 2x2 single-channel images, 3 classes.
std::unique_ptr<nn::Model> tiny_model() { return testing::tiny_classifier(); }

std::vector<float> expected_logits(const std::vector<float>& image) {
  std::unique_ptr<nn::Model> m = tiny_model();
  autograd::NoGradGuard no_grad;
  m->set_training(false);
  return m->forward(autograd::Variable(Tensor::from_vector({1, 1, 2, 2}, image))).value().to_vector();
}

std::string infer_body(const std::vector<float>& image, const std::string& id = "") {
  Json j = {{"inputs", {{{"name", "input"}, {"shape", {1, 4}}, {"datatype", "FP32"}, {"data", image}}}}};
  if (!id.empty()) j["id"] = id;
  return j.dump();
}

class Server : public ::testing::Test {
 protected:
  void start(ServerOptions options = {}, ModelShape shape = {"mlp", {1, 2, 2}, 3}, const std::string& name = "tiny") {
    options.port = 0;
    options.batch.max_delay_us = 2000;
    server_ = std::make_unique<InferenceServer>(
        std::vector<std::shared_ptr<ServedModel>>{std::make_shared<ServedModel>(name, "3", shape, tiny_model())},
        options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  std::unique_ptr<InferenceServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(Server, HealthMetadataAndInferenceAnswerAsTheProtocolSays) {
  start();
  httplib::Client c = client();
  auto live = c.Get("/v2/health/live");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  EXPECT_EQ(Json::parse(live->body)["live"], true);
  EXPECT_EQ(Json::parse(c.Get("/v2/health/ready")->body)["ready"], true);
  EXPECT_EQ(Json::parse(c.Get("/v2")->body)["name"], "gradmesh");
  const Json meta = Json::parse(c.Get("/v2/models/tiny")->body);
  EXPECT_EQ(meta["name"], "tiny");
  EXPECT_EQ(meta["versions"], Json({"3"}));
  EXPECT_EQ(meta["inputs"][0], Json({{"name", "input"}, {"datatype", "FP32"}, {"shape", {-1, 4}}}));
  EXPECT_EQ(meta["outputs"][1]["name"], "class");
  EXPECT_EQ(c.Get("/v2/models/tiny/versions/3")->status, 200);
  EXPECT_EQ(Json::parse(c.Get("/v2/models/tiny/ready")->body)["ready"], true);

  const std::vector<float> image = {0.5f, -1, 2, 0.25f};
  auto r = c.Post("/v2/models/tiny/versions/3/infer", infer_body(image, "q7"), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json out = Json::parse(r->body);
  EXPECT_EQ(out["model_name"], "tiny");
  EXPECT_EQ(out["model_version"], "3");
  EXPECT_EQ(out["id"], "q7");
  const std::vector<float> expected = expected_logits(image);
  ASSERT_EQ(out["outputs"][0]["data"].size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(static_cast<float>(out["outputs"][0]["data"][i].get<double>()), expected[i]) << i;
  const auto best = std::max_element(expected.begin(), expected.end()) - expected.begin();
  EXPECT_EQ(out["outputs"][1]["data"][0], best);
  // Only the output asked for.
  Json only = Json::parse(infer_body(image));
  only["outputs"] = {{{"name", "class"}}};
  const Json one = Json::parse(c.Post("/v2/models/tiny/infer", only.dump(), "application/json")->body);
  ASSERT_EQ(one["outputs"].size(), 1u);
  EXPECT_EQ(one["outputs"][0]["name"], "class");
}

TEST_F(Server, BinaryTensorsTravelBothWays) {
  start();
  httplib::Client c = client();
  const std::vector<float> image = {0.5f, -1, 2, 0.25f};
  const std::string json = R"({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32",)"
                           R"( "parameters": {"binary_data_size": 16}}], "parameters": {"binary_data_output": true}})";
  const std::string body = json + std::string(reinterpret_cast<const char*>(image.data()), 16);
  auto r = c.Post("/v2/models/tiny/infer", {{"Inference-Header-Content-Length", std::to_string(json.size())}}, body,
                  "application/octet-stream");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const size_t header = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
  const Json head = Json::parse(r->body.substr(0, header));
  EXPECT_EQ(head["outputs"][0]["parameters"]["binary_data_size"], 12);
  std::vector<float> logits(3);
  ASSERT_EQ(r->body.size(), header + 12 + 8);  // 3 logits (FP32), 1 class (INT64)
  std::memcpy(logits.data(), r->body.data() + header, 12);
  EXPECT_EQ(logits, expected_logits(image));
  auto bad = c.Post("/v2/models/tiny/infer", {{"Inference-Header-Content-Length", "many"}}, body,
                    "application/octet-stream");
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("Inference-Header-Content-Length: is 'many'"), std::string::npos) << bad->body;
}

TEST_F(Server, ConcurrentClientsEachGetTheirOwnAnswer) {
  start();
  std::vector<std::thread> clients;
  std::vector<std::string> failures(8);
  for (int t = 0; t < 8; ++t)
    clients.emplace_back([&, t] {
      httplib::Client c = client();
      for (int i = 0; i < 10; ++i) {
        const std::vector<float> image = {static_cast<float>(t), static_cast<float>(i), 1, -1};
        auto r = c.Post("/v2/models/tiny/infer", infer_body(image), "application/json");
        if (!r || r->status != 200) {
          failures[t] = "request failed";
          return;
        }
        const Json out = Json::parse(r->body);
        const std::vector<float> expected = expected_logits(image);
        // Batched with others, the row goes through a matrix product instead of a
        // matrix-vector one: the same sums in another order, within 1e-5.
        for (size_t k = 0; k < expected.size(); ++k)
          if (std::fabs(out["outputs"][0]["data"][k].get<double>() - expected[k]) > 1e-5 * (1 + std::fabs(expected[k])))
            failures[t] = "client " + std::to_string(t) + " request " + std::to_string(i) + " got another answer";
      }
    });
  for (std::thread& t : clients) t.join();
  for (const std::string& f : failures) EXPECT_EQ(f, "");
  const std::string metrics = server_->metrics_text();
  EXPECT_NE(metrics.find("gradmesh_serve_requests_total{model=\"tiny\",status=\"200\"} 80"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gradmesh_serve_batch_rows_count{model=\"tiny\"}"), std::string::npos);
  EXPECT_NE(metrics.find("gradmesh_serve_model_info{model=\"tiny\",version=\"3\"} 1"), std::string::npos);
}

TEST_F(Server, MalformedRequestsGetAFourHundredNamingTheProblem) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  start(o);
  httplib::Client c = client();
  struct Case {
    std::string path, body;
    int status;
    std::string expected;
  };
  const std::string ok_image = "[1, 2, 3, 4]";
  const std::vector<Case> cases = {
      {"/v2/models/tiny/infer", "{", 400, "request body: is not valid JSON"},
      {"/v2/models/tiny/infer", R"({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1]}]})",
       400, "inputs[0].data: holds 1 elements; the shape [1,4] needs 4"},
      {"/v2/models/tiny/infer", R"({"inputs": [{"name": "pixels", "shape": [1, 4], "datatype": "FP32", "data": )" +
                                    ok_image + "}]}",
       400, "input 'pixels': is not an input of model 'tiny'; it takes 'input'"},
      {"/v2/models/tiny/infer", R"({"inputs": [{"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]})",
       400, "has shape [1, 3]; model 'tiny' takes [-1, 4]"},
      {"/v2/models/tiny/infer", R"({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "INT64", "data": )" +
                                    ok_image + "}]}",
       400, "has datatype INT64; expected FP32"},
      {"/v2/models/tiny/infer", R"({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": )" +
                                    ok_image + R"(}], "outputs": [{"name": "probabilities"}]})",
       400, "output 'probabilities': is not an output of model 'tiny'"},
      {"/v2/models/nope/infer", "{}", 404, "model 'nope' is not served here"},
      {"/v2/models/tiny/versions/9/infer", "{}", 404, "has no version '9'; it serves version '3'"},
      {"/v2/nothing", "{}", 404, "no such endpoint: POST /v2/nothing"},
      {"/v2/models/tiny/infer", std::string(5000, ' '), 413, "larger than the server accepts"},
  };
  for (const Case& k : cases) {
    auto r = c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r) << k.path;
    EXPECT_EQ(r->status, k.status) << k.body.substr(0, 80) << " -> " << r->body;
    EXPECT_NE(Json::parse(r->body)["error"].get<std::string>().find(k.expected), std::string::npos)
        << k.body.substr(0, 80) << " -> " << r->body;
  }
  httplib::Headers binary = {{"Inference-Header-Content-Length", "10"}};
  auto r = c.Post("/v2/models/tiny/infer", binary, "{}", "application/octet-stream");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  // The server still answers correctly afterwards.
  auto ok = c.Post("/v2/models/tiny/infer", infer_body({1, 2, 3, 4}), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_NE(server_->metrics_text().find("gradmesh_serve_requests_total{model=\"tiny\",status=\"400\"} 7"),
            std::string::npos)
      << server_->metrics_text();
}

// The metadata's shape exactly (the batch free), finite values in float32's
// range: for a model that takes images, [1, 2, 2, 1] and [1, 4] hold the
// right number of values in an order it would misread.
TEST_F(Server, InputsMustMatchTheMetadataExactlyAndBeFinite) {
  start({}, ModelShape{"cnn", {1, 2, 2}, 3}, "images");  // the same network, declared as taking images
  httplib::Client c = client();
  auto meta = c.Get("/v2/models/images");
  ASSERT_TRUE(meta);
  EXPECT_EQ(Json::parse(meta->body)["inputs"][0]["shape"], Json({-1, 1, 2, 2}));
  const auto post = [&](const Json& shape, const std::string& data) {
    return c.Post("/v2/models/images/infer",
                  R"({"inputs": [{"name": "input", "datatype": "FP32", "shape": )" + shape.dump() + ", \"data\": " +
                      data + "}]}",
                  "application/json");
  };
  for (const Json& shape : {Json{1, 2, 2, 1}, Json{1, 4}, Json{1, 1, 1, 1, 1, 4}, Json{1, 2, 1, 2}, Json{4}}) {
    auto r = post(shape, "[1, 2, 3, 4]");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << shape;
    EXPECT_NE(r->body.find("model 'images' takes [-1, 1, 2, 2]"), std::string::npos) << r->body;
  }
  auto two = post({2, 1, 2, 2}, "[1, 2, 3, 4, 5, 6, 7, 8]");
  ASSERT_TRUE(two);
  EXPECT_EQ(two->status, 200) << two->body;
  auto huge = post({1, 1, 2, 2}, "[1, 2, 3.5e38, 4]");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 400);
  EXPECT_NE(huge->body.find("inputs[0].data[2]: is 3.5e38, outside float32's range"), std::string::npos) << huge->body;

  // Binary NaN and infinity: refused, naming the element.
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    const std::string header =
        R"({"inputs": [{"name": "input", "shape": [1, 1, 2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]})";
    std::string body = header;
    const float pixels[4] = {0.5f, 0.25f, 0.0f, bad};
    body.append(reinterpret_cast<const char*>(pixels), sizeof pixels);
    auto r = c.Post("/v2/models/images/infer", {{"Inference-Header-Content-Length", std::to_string(header.size())}},
                    body, "application/octet-stream");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("at element 3; the model takes finite FP32 values"), std::string::npos) << r->body;
  }
}

TEST_F(Server, TheBearerTokenGuardsEverythingButHealth) {
  ServerOptions o;
  o.token = "s3cret-token";
  start(o);
  httplib::Client c = client();
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  for (const char* path : {"/v2", "/v2/models/tiny", "/metrics"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
    EXPECT_NE(Json::parse(r->body)["error"].get<std::string>().find("Authorization: Bearer"), std::string::npos);
  }
  auto wrong = c.Post("/v2/models/tiny/infer", {{"Authorization", "Bearer s3cret-tokem"}}, infer_body({1, 2, 3, 4}),
                      "application/json");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_NE(wrong->body.find("not the server's"), std::string::npos);
  auto right = c.Post("/v2/models/tiny/infer", {{"Authorization", "Bearer s3cret-token"}}, infer_body({1, 2, 3, 4}),
                      "application/json");
  EXPECT_EQ(right->status, 200) << right->body;
  c.set_bearer_token_auth("s3cret-token");
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  // RFC 7235: the scheme is case-insensitive, and more than one space may follow it.
  for (const char* header : {"bearer s3cret-token", "BEARER s3cret-token", "Bearer  s3cret-token"}) {
    httplib::Client raw = client();
    auto r = raw.Get("/metrics", {{"Authorization", header}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << header;
  }
  for (const char* header : {"Bearers3cret-token", "Basic s3cret-token", "bearer", "Bearer s3cret-token2"}) {
    httplib::Client raw = client();
    auto r = raw.Get("/metrics", {{"Authorization", header}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << header;
  }
}

TEST_F(Server, StopDrainsAndThenRefusesConnections) {
  start();
  httplib::Client c = client();
  ASSERT_EQ(c.Post("/v2/models/tiny/infer", infer_body({1, 2, 3, 4}), "application/json")->status, 200);
  server_->stop();
  thread_.join();
  httplib::Client after = client();
  after.set_connection_timeout(1, 0);
  EXPECT_FALSE(after.Get("/v2/health/live")) << "the listening socket is closed";
}

}  // namespace
}  // namespace gradmesh::serve
