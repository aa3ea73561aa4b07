// The server against thousands of malformed requests over raw sockets:
// mutated and truncated bodies, broken headers and request lines, bad
// chunked encodings, lying Content-Lengths, connections cut mid-request.
// None may crash it (this test also runs under ASan and UBSan), none may get
// a 5xx, and afterwards it still answers a good request correctly.
// Deterministic: the mutations come from a fixed seed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "gradmesh/nn/models.h"
#include "gradmesh/serve/inference_server.h"

namespace gradmesh::serve {
namespace {

using Json = nlohmann::json;

// Sends `bytes` on a fresh connection (closing the writing side when
// `half_close`), and returns what came back within a second: "" when the
// server closed without answering.
std::string exchange(int port, const std::string& bytes, bool half_close) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "socket failed";
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    reply.append(buffer, static_cast<size_t>(n));
    if (reply.find("\r\n\r\n") != std::string::npos && !half_close) break;  // a status line and headers are enough
  }
  ::close(fd);
  return reply;
}

std::string request(const std::string& body, const std::string& extra_headers = "") {
  return "POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

TEST(ServerFuzz, ThousandsOfMalformedRequestsNeverCrashItOrGetAFiveHundred) {
  nn::MlpSpec spec;
  spec.in_features = 4;
  spec.hidden = {8};
  spec.classes = 3;
  ServerOptions o;
  o.port = 0;
  o.max_body_bytes = 1 << 16;
  o.batch.max_delay_us = 0;
  InferenceServer server(
      {std::make_shared<ServedModel>("tiny", "1", ModelShape{"mlp", {1, 2, 2}, 3},
                                     std::make_unique<nn::Model>(nn::build_mlp(spec), 3))},
      o);
  const int port = server.bind();
  std::thread serving([&] { server.run(); });

  const std::string good =
      R"({"id": "q", "inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})";
  const std::string pieces = "{}[]\":,0123456789.-e+truefalsenull \\u00ff\x01\x80\xff";
  std::mt19937 rng(20261202);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int five_hundreds = 0, answered = 0, complete = 0, complete_answered = 0;
  std::string first_bad;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes;
    bool half_close = false;
    std::string body = good;
    switch (i % 8) {
      case 0:  // bytes of the body replaced
        for (int k = 0; k < 1 + static_cast<int>(pick(6)); ++k) body[pick(body.size())] = pieces[pick(pieces.size())];
        bytes = request(body);
        break;
      case 1:  // the body cut short, the Content-Length honest
        bytes = request(body.substr(0, pick(body.size())));
        break;
      case 2:  // a Content-Length promising more than comes, then the connection closes
        bytes = request(body).substr(0, request(body).size() - 1 - pick(body.size()));
        half_close = true;
        break;
      case 3: {  // a chunked body with broken chunk sizes
        const std::string sizes[] = {"zz", "-1", "ffffffffffffffff", "4;x=y", "", "100000000"};
        bytes = "POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                sizes[pick(6)] + "\r\n" + body.substr(0, 10) + "\r\n0\r\n\r\n";
        half_close = true;
        break;
      }
      case 4: {  // a broken request line or header
        const std::string lines[] = {"POST\r\n\r\n", "GARBAGE / HTTP/1.1\r\n\r\n", "POST /v2/models/tiny/infer HTTP/9.9\r\n\r\n",
                                     "POST /v2/models/tiny/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                                     "POST /v2/models/tiny/infer HTTP/1.1\r\nContent-Length: 1e9\r\n\r\n",
                                     "POST /v2/models/tiny/infer HTTP/1.1\r\nNoColonHeader\r\n\r\n",
                                     "POST /v2/models/%zz/infer HTTP/1.1\r\n\r\n"};
        bytes = lines[pick(7)];
        half_close = true;
        break;
      }
      case 5:  // a header line over the library's limit
        bytes = request(body, "X-Long: " + std::string(9000 + pick(4000), 'a') + "\r\n");
        break;
      case 6:  // random bytes
        for (size_t k = 0, n = 1 + pick(300); k < n; ++k) bytes += static_cast<char>(rng() & 0xff);
        half_close = true;
        break;
      case 7: {  // binary extension with lying sizes
        const std::string json = R"({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": )" +
                                 std::to_string(pick(40)) + "}}]}";
        const std::string raw(pick(24), '\x01');
        bytes = request(json + raw, "Inference-Header-Content-Length: " + std::to_string(pick(json.size() + 30)) + "\r\n");
        break;
      }
    }
    const std::string reply = exchange(port, bytes, half_close);
    // Requests whose bytes all arrive with an honest length must each get an answer.
    const bool whole = i % 8 == 0 || i % 8 == 1 || i % 8 == 7;
    complete += whole;
    if (reply.rfind("HTTP/1.1 ", 0) == 0) {
      ++answered;
      complete_answered += whole;
      if (reply[9] == '5') {
        ++five_hundreds;
        if (first_bad.empty()) first_bad = bytes.substr(0, 200) + "\n->\n" + reply.substr(0, 300);
      }
    }
  }
  EXPECT_EQ(five_hundreds, 0) << first_bad;
  EXPECT_EQ(complete_answered, complete) << "a complete request, however malformed, gets a status";
  EXPECT_GT(answered, complete) << "so do many of the broken ones";
  // Still answering, and correctly.
  httplib::Client c("127.0.0.1", port);
  auto r = c.Post("/v2/models/tiny/infer", good, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["id"], "q");
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace gradmesh::serve
