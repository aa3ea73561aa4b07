// The inference protocol over gRPC on loopback, driven by a client that
// shares no code with the server (tests/serve/grpc_client.py: Debian's
// grpcio and protoc's Python classes for grpc_service.proto): health,
// metadata, inference with typed and with raw tensors answering exactly what
// the model computes, errors as gRPC codes naming the field, the bearer
// token in the metadata, and the metrics shared with HTTP. Skipped, saying
// so, where grpcio, protobuf or protoc is missing; `make test` installs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cli/run_command.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/serve/inference_server.h"
#include "serve/tiny_classifier.h"
#include "support/temp_dir.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

TEST(GrpcFront, AnIndependentClientGetsWhatTheModelComputes) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "Debian's python3 is not installed";
  ServerOptions o;
  o.port = 0;
  o.grpc_port = 0;
  o.token = "s3cret";
  o.batch.max_delay_us = 1000;
  InferenceServer server({std::make_shared<ServedModel>("tiny", "3", ModelShape{"mlp", {1, 2, 2}, 3},
                                                        testing::tiny_classifier())},
                         o);
  server.bind();
  ASSERT_GT(server.grpc_port(), 0);
  std::thread running([&] { server.run(); });
  gradmesh::testing::TempDir dir;
  const gradmesh::testing::CommandResult r = gradmesh::testing::run_shell(
      "/usr/bin/python3 '" GRADMESH_SOURCE_DIR "/tests/serve/grpc_client.py' " + std::to_string(server.grpc_port()) +
          " s3cret '" + dir.path() + "'",
      dir.path());
  const std::string metrics = server.metrics_text();
  server.stop();
  running.join();
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const Json out = Json::parse(r.out);

  EXPECT_TRUE(out["live"].get<bool>());
  EXPECT_TRUE(out["ready"].get<bool>());
  EXPECT_EQ(out["server_name"], "gradmesh");
  EXPECT_EQ(out["no_token"]["code"], "UNAUTHENTICATED");
  EXPECT_EQ(out["model"]["versions"], Json({"3"}));
  EXPECT_EQ(out["model"]["platform"], "gradmesh_mlp");
  EXPECT_EQ(out["model"]["input_shape"], Json({-1, 4}));
  EXPECT_EQ(out["model"]["outputs"], Json({"logits", "class"}));
  EXPECT_TRUE(out["model_ready"].get<bool>());
  EXPECT_EQ(out["unknown_model"]["code"], "NOT_FOUND");

  const std::vector<float> rows = {0.1f, 0.2f, 0.3f, 0.4f, -1.0f, 0.5f, 2.0f, 0.0f};
  std::vector<float> want;
  {
    std::unique_ptr<nn::Model> m = testing::tiny_classifier();
    autograd::NoGradGuard no_grad;
    m->set_training(false);
    want = m->forward(autograd::Variable(Tensor::from_vector({2, 4}, rows))).value().to_vector();
  }
  ASSERT_TRUE(out["typed_error"].is_null()) << out["typed_error"];
  EXPECT_EQ(out["typed"]["id"], "req-7");
  EXPECT_EQ(out["typed"]["version"], "3");
  EXPECT_EQ(out["typed"]["outputs"]["logits"]["shape"], Json({2, 3}));
  EXPECT_EQ(out["typed"]["outputs"]["logits"]["fp32"].get<std::vector<float>>(), want);
  EXPECT_EQ(out["typed"]["outputs"]["class"]["datatype"], "INT64");
  EXPECT_EQ(out["typed"]["outputs"]["class"]["int64"].size(), 2u);
  ASSERT_TRUE(out["raw_error"].is_null()) << out["raw_error"];
  EXPECT_EQ(out["raw"]["names"], Json({"logits"}));
  EXPECT_EQ(out["raw"]["logits"].get<std::vector<float>>(), want);

  const Json& bad = out["bad"];
  for (const char* k : {"short", "shape", "nan", "datatype"}) EXPECT_EQ(bad[k]["code"], "INVALID_ARGUMENT") << k;
  EXPECT_NE(bad["short"]["message"].get<std::string>().find("inputs[0].contents: holds 3 FP32 values; the shape needs 4"),
            std::string::npos) << bad["short"];
  EXPECT_NE(bad["shape"]["message"].get<std::string>().find("has shape [1, 2, 2]; model 'tiny' takes [-1, 4]"),
            std::string::npos) << bad["shape"];
  EXPECT_NE(bad["nan"]["message"].get<std::string>().find("holds NaN at element 1"), std::string::npos) << bad["nan"];
  EXPECT_NE(bad["datatype"]["message"].get<std::string>().find("inputs[0].datatype"), std::string::npos);
  EXPECT_NE(metrics.find("gradmesh_serve_requests_total{model=\"tiny\",status=\"200\"} 2"), std::string::npos)
      << "gRPC requests count in the same metrics as HTTP's\n" << metrics;
  EXPECT_NE(metrics.find("gradmesh_serve_requests_total{model=\"tiny\",status=\"400\"} 2"), std::string::npos)
      << "the shape and NaN refusals (the model's checks) count too\n" << metrics;
}

}  // namespace
}  // namespace gradmesh::serve
