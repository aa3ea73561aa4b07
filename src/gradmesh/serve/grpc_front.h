// The Open Inference Protocol over gRPC (`gradmesh serve --grpc-port`):
// the protocol's GRPCInferenceService (grpc_service.proto, its names and
// numbers) on grpc++, answering from the same models, batchers, token and
// metrics as the HTTP front end, through ProtocolCore.
//
//   ServerLive, ServerReady              never need a token
//   ServerMetadata, ModelMetadata, ModelReady, ModelInfer
//                                        metadata "authorization: Bearer <token>"
//
// ModelInfer takes inputs as typed contents (fp32_contents, int64_contents,
// ...) or as raw_input_contents (little-endian bytes, one entry per input),
// and answers in the same form. Errors map onto gRPC codes: a malformed
// request INVALID_ARGUMENT naming the field (as the HTTP 400s do), an
// unknown model NOT_FOUND, no or a wrong token UNAUTHENTICATED, a full
// queue or a stopping server UNAVAILABLE, a failed forward pass INTERNAL.
// grpc++ stays inside grpc_front.cc, which serves the protocol as a generic
// service and reads and writes its messages with grpc_wire.h (no libprotobuf).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/serve/infer_json.h"
#include "gradmesh/serve/served_model.h"

namespace gradmesh::serve {

// A request the server refuses, with the HTTP status that says why (400,
// 401, 404, 503, 500); each front end answers it in its own terms.
class ProtocolError : public std::runtime_error {
 public:
  ProtocolError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

struct ModelInfo {
  std::string name, version, platform;
  TensorSpec input;
  std::vector<TensorSpec> outputs;
  bool ready = false;
};

struct InferReply {
  std::string model_name, model_version, id;
  std::vector<InferOutput> outputs;
};

// What a front end asks of the server. Thread-safe.
class ProtocolCore {
 public:
  virtual ~ProtocolCore() = default;
  virtual bool ready() const = 0;
  // Whether an Authorization value carries the server's token (true when it has none).
  virtual bool authorized(const std::string& authorization) const = 0;
  // ProtocolError(404) for an unknown model or version.
  virtual ModelInfo model(const std::string& name, const std::string& version) const = 0;
  // Runs the request through the model's batcher; counts it in the metrics.
  // ProtocolError for anything refused.
  virtual InferReply infer(const std::string& name, const std::string& version, InferRequest request) = 0;
  // The same without a thread waiting for the batch: `done` gets the reply
  // or the refusal (the other pointer null), on the batcher's thread or, for
  // a refusal before the batch, on the caller's.
  using InferDone = std::function<void(InferReply* reply, const ProtocolError* refused)>;
  virtual void infer_async(const std::string& name, const std::string& version, InferRequest request,
                           InferDone done) = 0;
};

struct GrpcOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int64_t max_message_bytes = int64_t{64} << 20;
  RequestLimits limits;
};

class GrpcFront {
 public:
  GrpcFront(ProtocolCore& core, GrpcOptions options);
  ~GrpcFront();
  GrpcFront(const GrpcFront&) = delete;
  GrpcFront& operator=(const GrpcFront&) = delete;

  // Listens and starts serving on grpc++'s threads; returns the port.
  // Error(kIo) naming host:port when it cannot listen.
  int start();
  // Stops accepting calls; those in flight get up to `drain` to finish.
  void stop(std::chrono::milliseconds drain);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::serve
