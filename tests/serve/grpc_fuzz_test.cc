// The gRPC front end against thousands of malformed ModelInfer messages over
// a real connection (grpc++'s generic stub sends the raw bytes): bytes
// replaced, cut, duplicated and lengths that lie, in a valid request built
// with the codec. None may crash the server (this runs under ASan and UBSan
// in CI), none may get INTERNAL or UNKNOWN, and afterwards a good request
// still gets the model's answer. Deterministic: a fixed seed.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "gradmesh/serve/grpc_wire.h"
#include "gradmesh/serve/inference_server.h"
#include "serve/tiny_classifier.h"

namespace gradmesh::serve {
namespace {

// A ModelInferRequest for the tiny classifier: one [1, 4] FP32 input, typed
// (fp32_contents) or raw (raw_input_contents).
std::string infer_message(bool raw) {
  const float values[4] = {1, 2, 3, 4};
  wire::Writer input;
  input.string_field(1, "input");
  input.string_field(2, "FP32");
  input.packed_int64(3, {1, 4});
  if (!raw) {
    wire::Writer contents;
    contents.packed_fp32(6, values, 4);
    input.bytes_field(5, contents.bytes());
  }
  wire::Writer request;
  request.string_field(1, "tiny");
  request.string_field(3, "q");
  request.bytes_field(5, input.bytes());
  wire::Writer output;
  output.string_field(1, "logits");
  request.bytes_field(6, output.bytes());
  if (raw) request.bytes_field(7, std::string(reinterpret_cast<const char*>(values), sizeof values));
  return request.bytes();
}

grpc::Status call(grpc::GenericStub& stub, const std::string& bytes, std::string* reply) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  // A mutex, not a future: ThreadSanitizer sees the hand-over through it
  // (libstdc++'s futures wait inside the uninstrumented library).
  std::mutex mutex;
  std::condition_variable finished;
  std::optional<grpc::Status> result;
  stub.UnaryCall(&context, "/inference.GRPCInferenceService/ModelInfer", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mutex);
                   result = std::move(s);
                   finished.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mutex);
  finished.wait(lock, [&] { return result.has_value(); });
  const grpc::Status status = *result;
  if (status.ok() && reply) {
    std::vector<grpc::Slice> slices;
    reply->clear();
    if (response.Dump(&slices).ok())
      for (const grpc::Slice& s : slices) reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return status;
}

TEST(GrpcFuzz, ThousandsOfMalformedMessagesNeverCrashItOrGetAnInternalError) {
  ServerOptions o;
  o.port = 0;
  o.grpc_port = 0;
  o.batch.max_delay_us = 0;
  InferenceServer server({std::make_shared<ServedModel>("tiny", "1", ModelShape{"mlp", {1, 2, 2}, 3},
                                                        testing::tiny_classifier())},
                         o);
  server.bind();
  std::thread serving([&] { server.run(); });
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.grpc_port()), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);

  std::string answer;
  ASSERT_TRUE(call(stub, infer_message(false), &answer).ok());
  const std::string good_answer = answer;
  ASSERT_TRUE(call(stub, infer_message(true), &answer).ok());

  std::mt19937 rng(20261207);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  int ok = 0, refused = 0, internal = 0;
  std::string first_internal;
  for (int i = 0; i < 1500; ++i) {
    std::string bytes = infer_message(i % 2 == 1);
    switch (i % 5) {
      case 0:  // bytes replaced
        for (int k = 0, n = 1 + static_cast<int>(pick(4)); k < n; ++k) bytes[pick(bytes.size())] = static_cast<char>(rng());
        break;
      case 1:  // cut short
        bytes.resize(pick(bytes.size()));
        break;
      case 2: {  // a stretch duplicated
        const size_t at = pick(bytes.size()), n = 1 + pick(8);
        bytes.insert(at, bytes.substr(at, n));
        break;
      }
      case 3:  // a length or varint byte made huge
        bytes[pick(bytes.size())] = static_cast<char>(0xff);
        break;
      case 4:  // random bytes
        bytes.clear();
        for (size_t k = 0, n = pick(200); k < n; ++k) bytes += static_cast<char>(rng());
        break;
    }
    const grpc::Status s = call(stub, bytes, nullptr);
    if (s.ok()) {
      ++ok;
    } else if (s.error_code() == grpc::StatusCode::INTERNAL || s.error_code() == grpc::StatusCode::UNKNOWN) {
      ++internal;
      if (first_internal.empty()) first_internal = s.error_message();
    } else {
      ++refused;
    }
  }
  EXPECT_EQ(internal, 0) << first_internal;
  EXPECT_GT(refused, 500) << "most mutations break the message";
  EXPECT_GT(ok, 10) << "some leave it valid (a changed value, a repeated field)";
  ASSERT_TRUE(call(stub, infer_message(false), &answer).ok()) << "still answering";
  EXPECT_EQ(answer, good_answer) << "and answering the same";
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace gradmesh::serve
