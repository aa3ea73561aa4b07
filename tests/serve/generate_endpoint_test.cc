// A GPT's generate endpoints over HTTP: /generate returns the text
// nn::generate gives for the seed, /generate_stream sends the same text as
// server-sent events ending with the finish reason, and models or requests
// that cannot generate get a 400 naming why.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "gradmesh/core/error.h"
#include "gradmesh/nn/generate.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/serve/inference_server.h"
#include "serve/tiny_gpt.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

using testing::letters;
using testing::tiny_gpt_spec;


// A request sent on a raw socket, which the test can then read part of and close.
class RawRequest {
 public:
  RawRequest(int port, const std::string& path, const std::string& body) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string request = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                 ::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size());
  }
  ~RawRequest() { hang_up(); }
  bool connected() const { return connected_; }
  // Reads until `text` has arrived (or the connection closes: then all of it).
  std::string read_until(const std::string& text) {
    char buf[4096];
    while (text.empty() || received_.find(text) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string received_;
};

// The tokens generated so far by `lm`, as /metrics counts them (0 before any).
double generated_tokens(const InferenceServer& server) {
  const std::string text = server.metrics_text(), key = "gradmesh_serve_generated_tokens_total{model=\"lm\"} ";
  const size_t at = text.find(key);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + key.size()));
}

class GenerateEndpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpt = std::make_shared<ServedModel>("lm", "1", ModelShape{"gpt", {8}, 11},
                                             std::make_unique<nn::Model>(nn::build_gpt(tiny_gpt_spec()), 5));
    gpt->set_codec(letters());
    nn::MlpSpec mlp;
    mlp.in_features = 4;
    mlp.hidden = {4};
    mlp.classes = 2;
    auto classifier = std::make_shared<ServedModel>("clf", "1", ModelShape{"mlp", {1, 2, 2}, 2},
                                                    std::make_unique<nn::Model>(nn::build_mlp(mlp), 1));
    ServerOptions o;
    o.port = 0;
    server_ = std::make_unique<InferenceServer>(std::vector<std::shared_ptr<ServedModel>>{gpt, classifier}, o);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  std::string expected(const std::string& prompt, int64_t max_tokens, uint64_t seed) {
    nn::Model model(nn::build_gpt(tiny_gpt_spec()), 5);
    nn::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.temperature = 0.8;
    o.seed = seed;
    return letters().decode(nn::generate(static_cast<nn::Gpt&>(model.root()), letters().encode(prompt), o));
  }
  std::unique_ptr<InferenceServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(GenerateEndpoint, WholeAndStreamedTextIsWhatGenerateGivesForTheSeed) {
  httplib::Client c("127.0.0.1", port_);
  const std::string body =
      R"({"text_input": "abc", "parameters": {"max_tokens": 12, "temperature": 0.8, "seed": 4}})";
  auto r = c.Post("/v2/models/lm/generate", body, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const Json whole = Json::parse(r->body);
  EXPECT_EQ(whole["text_output"], expected("abc", 12, 4));
  EXPECT_EQ(whole["finish_reason"], "length");
  EXPECT_EQ(whole["model_version"], "1");
  EXPECT_EQ(whole["tokens"], 12);

  auto s = c.Post("/v2/models/lm/generate_stream", body, "application/json");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200);
  EXPECT_EQ(s->get_header_value("Content-Type"), "text/event-stream");
  std::string streamed;
  int events = 0;
  Json last;
  for (size_t at = 0; (at = s->body.find("data: ", at)) != std::string::npos;) {
    const size_t end = s->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    last = Json::parse(s->body.substr(at + 6, end - at - 6));
    streamed += last["text_output"].get<std::string>();
    ++events;
    at = end;
  }
  EXPECT_EQ(streamed, whole["text_output"]);
  EXPECT_GT(events, 1) << "text arrives token by token";
  EXPECT_EQ(last["finish_reason"], "length");
  EXPECT_NE(server_->metrics_text().find("gradmesh_serve_generated_tokens_total{model=\"lm\"} 24"), std::string::npos);
}

// A client that hangs up cancels its sequence at the next step, whole or
// streamed: a million tokens asked for, far fewer generated.
TEST_F(GenerateEndpoint, AClientThatHangsUpCancelsItsGeneration) {
  const std::string body = R"({"text_input": "abc", "parameters": {"max_tokens": 1000000, "seed": 1}})";
  double before = 0;
  for (const std::string path : {"/v2/models/lm/generate_stream", "/v2/models/lm/generate"}) {
    SCOPED_TRACE(path);
    {
      RawRequest r(port_, path, body);
      ASSERT_TRUE(r.connected());
      if (path.find("stream") != std::string::npos) {
        ASSERT_NE(r.read_until("data: ").find("data: "), std::string::npos);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }  // hangs up
    double now = before;
    for (int i = 0; i < 600 && now == before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      now = generated_tokens(*server_);
    }
    EXPECT_GT(now, before) << "the generation never ended";
    EXPECT_LT(now - before, 1000000) << "the generation ran to max_tokens after its client had gone";
    before = now;
  }
}

// SIGTERM's stop(): a stream in flight runs to its final event.
TEST_F(GenerateEndpoint, StopLetsAStreamInFlightEndWithItsFinalEvent) {
  RawRequest r(port_, "/v2/models/lm/generate_stream",
               R"({"text_input": "abc", "parameters": {"max_tokens": 3000, "seed": 2}})");
  ASSERT_TRUE(r.connected());
  ASSERT_NE(r.read_until("data: ").find("data: "), std::string::npos);
  std::thread stopper([this] { server_->stop(); });
  const std::string all = r.read_until("");
  stopper.join();
  EXPECT_NE(all.find("\"finish_reason\":\"length\""), std::string::npos) << all.substr(all.size() > 400 ? all.size() - 400 : 0);
  EXPECT_NE(all.find("\"tokens\":3000"), std::string::npos);
  EXPECT_NE(all.find("\r\n0\r\n\r\n"), std::string::npos) << "the stream's last chunk";
}

TEST_F(GenerateEndpoint, ModelsAndRequestsThatCannotGenerateAreNamed) {
  httplib::Client c("127.0.0.1", port_);
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"/v2/models/clf/generate", R"({"text_input": "abc"})", "model 'clf' does not generate text"},
      {"/v2/models/lm/generate", R"({"text": "abc"})", "text_input: is missing"},
      {"/v2/models/lm/generate", R"({"text_input": "xyz"})", "text_input: holds 'x'"},
      {"/v2/models/lm/generate", R"({"text_input": "abcdefghij"})", "more than the model's context of 8"},
      {"/v2/models/lm/generate_stream", R"({"text_input": "a", "parameters": {"top_k": -2}})", "parameters.top_k"},
  };
  for (const auto& [path, body, message] : cases) {
    auto r = c.Post(path, body, "application/json");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    EXPECT_NE(Json::parse(r->body)["error"].get<std::string>().find(message), std::string::npos) << r->body;
  }
}

}  // namespace
}  // namespace gradmesh::serve
