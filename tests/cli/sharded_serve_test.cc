// gradmesh serve --mesh through the real binary: a GPT trained on fortunes,
// served whole and split into pipeline stages, tensor shards and both, gives
// the same answers (the stages' logits bit-identical, the shards' within
// float rounding of their sums, the same generated text); SIGTERM drains the
// split server and every process exits 0; bad meshes are named. Skips
// visibly when fortunes is missing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "elastic/launcher_process.h"

namespace gradmesh::testing {
namespace {

using Json = nlohmann::json;

struct Answers {
  std::vector<float> logits;  // of two rows' last positions
  std::string greedy, sampled, streamed;
};

class ShardedServe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "fortunes not installed (" << kFortunes << ")";
    CommandResult r = run_gradmesh(std::string("data prepare-text --vocab char --input ") + kFortunes + " --output tokens",
                                   dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Three blocks (stages of unequal size), two heads (one per shard), an
    // untied head, and the character vocabulary's odd size (shards of
    // unequal width).
    r = run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set output.run_id=g"
                     " --set model.kind=gpt --set data.format=tokens --set data.tokens=" + dir_.file("tokens") + " --set model.n_layer=3"
                     " --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set model.tie_weights=false"
                     " --set train.batch_size=8 --set optim.name=adamw --set optim.lr=0.003 --set data.limit_test=16"
                     " --set train.threads=1 --set output.report=false --set output.trace_steps=0"
                     " --set train.max_steps=30",
                     dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // Starts `gradmesh serve m=runs/g <extra>`, asks it the same questions, drains it.
  Answers ask(const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = {"serve", "m=" + dir_.file("runs/g"), "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    LauncherProcess server(args, dir_.path(), name);
    const int port = wait_for_listening_port(server);
    Answers a;
    EXPECT_GT(port, 0) << server.err();
    if (port == 0) return a;
    httplib::Client c("127.0.0.1", port);
    const Json infer = {{"inputs", {{{"name", "tokens"}, {"datatype", "INT64"}, {"shape", {2, 4}},
                                     {"data", {1, 2, 3, 4, 5, 6, 7, 8}}}}}};
    auto r = c.Post("/v2/models/m/infer", infer.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer") << server.err();
    if (r && r->status == 200) {
      const Json out = Json::parse(r->body);
      for (const Json& v : out["outputs"][0]["data"]) a.logits.push_back(v.get<float>());
    }
    auto generate = [&](const std::string& path, const Json& params) {
      auto g = c.Post(path, Json{{"text_input", "The "}, {"parameters", params}}.dump(), "application/json");
      EXPECT_TRUE(g && g->status == 200) << (g ? g->body : "no answer") << server.err();
      return g ? g->body : "";
    };
    a.greedy = Json::parse(generate("/v2/models/m/generate", {{"max_tokens", 40}, {"temperature", 0}}))["text_output"];
    a.sampled = Json::parse(generate("/v2/models/m/generate", {{"max_tokens", 40}, {"seed", 7}}))["text_output"];
    // Past the context of 32: the caches start over from the last half on every rank.
    const std::string events = generate("/v2/models/m/generate_stream", {{"max_tokens", 50}, {"temperature", 0}});
    for (size_t at = events.find("\"text_output\":\""); at != std::string::npos;
         at = events.find("\"text_output\":\"", at + 1)) {
      const size_t from = at + 15, to = events.find('"', from);
      a.streamed += events.substr(from, to - from);
    }
    server.signal(SIGTERM);
    EXPECT_EQ(server.wait(std::chrono::milliseconds(30'000)), 0) << server.err();
    return a;
  }

  TempDir dir_;
};

TEST_F(ShardedServe, EverySplitAnswersAsTheWholeModel) {
  const Answers whole = ask({}, "whole");
  ASSERT_EQ(whole.logits.size(), 2u * 93u) << "two rows of the character vocabulary's logits";
  ASSERT_EQ(whole.greedy.size(), 40u);
  EXPECT_GE(whole.streamed.size(), 40u);

  const Answers stages = ask({"--mesh", "pp=2"}, "pp");
  EXPECT_EQ(stages.logits, whole.logits) << "pipeline stages run the same arithmetic";
  EXPECT_EQ(stages.greedy, whole.greedy);
  EXPECT_EQ(stages.sampled, whole.sampled);
  EXPECT_EQ(stages.streamed, whole.streamed);

  for (const auto& [mesh, nproc] : {std::pair<std::string, std::string>{"tp=2", "2"}, {"pp=2,tp=2", "4"}}) {
    const Answers split = ask({"--mesh", mesh, "--nproc", nproc}, "mesh" + nproc);
    ASSERT_EQ(split.logits.size(), whole.logits.size()) << mesh;
    for (size_t i = 0; i < whole.logits.size(); ++i)
      EXPECT_NEAR(split.logits[i], whole.logits[i], 1e-4) << mesh << " logit " << i;
    EXPECT_EQ(split.greedy, whole.greedy) << mesh;
    EXPECT_EQ(split.streamed, whole.streamed) << mesh;
  }
}

TEST_F(ShardedServe, MeshesThatCannotServeAreNamed) {
  const std::string model = " m=" + dir_.file("runs/g") + " --port 0";
  expect_usage_errors("serve" + model,
                      {
                          {"--mesh dp=2", "a server is one replica"},
                          {"--mesh pp=x", "pp = 'x' is not an integer"},
                          {"--mesh pp=2,pp=2", "'pp' is not pp or tp, or is given twice"},
                          {"--mesh pp=2 --nproc 3", "--mesh 'pp=2' has 2"},
                          {"--mesh pp=2 --watch", "hot reload of a model split across processes"},
                          {"--mesh pp=4", "4 stages need at least as many blocks, model.n_layer = 3"},
                      },
                      dir_.path());
  const CommandResult two = run_gradmesh("serve a=" + dir_.file("runs/g") + " b=" + dir_.file("runs/g") +
                                             " --port 0 --mesh tp=2",
                                         dir_.path());
  EXPECT_EQ(two.exit_code, 2) << two.err;
  EXPECT_NE(two.err.find("a split model is served alone"), std::string::npos) << two.err;
}

}  // namespace
}  // namespace gradmesh::testing
