#include "gradmesh/serve/grpc_front.h"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "gradmesh/config.h"
#include "gradmesh/core/error.h"
#include "gradmesh/serve/grpc_wire.h"

namespace gradmesh::serve {

// Named, not anonymous: GrpcFront::Impl holds the Service.
namespace grpc_front_internal {

using wire::Field;
using wire::Reader;
using wire::Writer;

grpc::Status to_status(const ProtocolError& e) {
  switch (e.status()) {
    case 400:
      return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
    case 401:
      return {grpc::StatusCode::UNAUTHENTICATED, e.what()};
    case 404:
      return {grpc::StatusCode::NOT_FOUND, e.what()};
    case 503:
      return {grpc::StatusCode::UNAVAILABLE, e.what()};
    default:
      return {grpc::StatusCode::INTERNAL, e.what()};
  }
}

std::string text(const Field& f, const Reader& r) {
  if (f.type != wire::kLength) r.fail(f.number, "is not a string");
  return std::string(f.data);
}

// A sub-message field's bytes: a view into the enclosing message's.
std::string_view message(const Field& f, const Reader& r) {
  if (f.type != wire::kLength) r.fail(f.number, "is not a message");
  return f.data;
}

// ModelReadyRequest and ModelMetadataRequest: {1: name, 2: version}.
std::pair<std::string, std::string> name_and_version(std::string_view bytes, const std::string& what) {
  Reader r(bytes, what);
  std::pair<std::string, std::string> out;
  for (Field f; r.next(f);) {
    if (f.number == 1) out.first = text(f, r);
    if (f.number == 2) out.second = text(f, r);
  }
  return out;
}

std::string tensor_metadata(const TensorSpec& spec) {
  Writer w;
  w.string_field(1, spec.name);
  w.string_field(2, datatype_name(spec.datatype));
  w.packed_int64(3, spec.shape);
  return w.bytes();
}

std::string model_metadata(const ModelInfo& m) {
  Writer w;
  w.string_field(1, m.name);
  w.bytes_field(2, m.version);
  w.string_field(3, m.platform);
  w.bytes_field(4, tensor_metadata(m.input));
  for (const TensorSpec& s : m.outputs) w.bytes_field(5, tensor_metadata(s));
  return w.bytes();
}

// One InferInputTensor as read: its contents stay as values per type.
struct WireInput {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::vector<float> fp32;
  std::vector<double> fp64;
  std::vector<uint64_t> ints;  // bool, int32, int64, uint32, uint64 contents, as varints
  int int_field = 0;           // which contents field `ints` came from
};

void read_contents(std::string_view bytes, const std::string& what, WireInput& in) {
  Reader r(bytes, what);
  for (Field f; r.next(f);) {
    if (f.number == 6) {  // fp32_contents: read straight into floats
      if (f.type == wire::kFixed32) {
        float v;
        std::memcpy(&v, &f.varint, 4);
        in.fp32.push_back(v);
      } else {
        if (f.type != wire::kLength || f.data.size() % 4 != 0) r.fail(6, "is not packed float32 values");
        const size_t at = in.fp32.size();
        in.fp32.resize(at + f.data.size() / 4);
        std::memcpy(in.fp32.data() + at, f.data.data(), f.data.size());
      }
    } else if (f.number == 7) {
      std::vector<uint64_t> bits;
      r.repeated(f, wire::kFixed64, bits);
      for (const uint64_t b : bits) {
        double v;
        std::memcpy(&v, &b, 8);
        in.fp64.push_back(v);
      }
    } else if (f.number >= 1 && f.number <= 5) {
      if (in.int_field != 0 && in.int_field != f.number) r.fail(f.number, "is a second kind of integer contents");
      in.int_field = f.number;
      r.repeated(f, wire::kVarint, in.ints);
    }
  }
}

WireInput read_input(std::string_view bytes, const std::string& what) {
  Reader r(bytes, what);
  WireInput in;
  for (Field f; r.next(f);) {
    if (f.number == 1) in.name = text(f, r);
    if (f.number == 2) in.datatype = text(f, r);
    if (f.number == 3) {
      std::vector<uint64_t> dims;
      r.repeated(f, wire::kVarint, dims);
      for (const uint64_t d : dims) in.shape.push_back(static_cast<int64_t>(d));
    }
    if (f.number == 5) read_contents(message(f, r), what + ".contents", in);
  }
  return in;
}

// The values of a typed-contents input as float32, with the JSON path's checks.
std::vector<float> typed_values(const WireInput& in, Datatype type, const std::string& field) {
  static const std::map<Datatype, int> kField = {{Datatype::kBool, 1},  {Datatype::kInt32, 2}, {Datatype::kInt64, 3},
                                                 {Datatype::kUint8, 4}, {Datatype::kFp32, 6},  {Datatype::kFp64, 7}};
  const int expected = kField.at(type);
  const bool has_other = (expected != 6 && !in.fp32.empty()) || (expected != 7 && !in.fp64.empty()) ||
                         (in.int_field != 0 && in.int_field != expected);
  if (has_other)
    throw_error(ErrorKind::kUsage, field, std::string("holds contents of another type than the datatype ") +
                                              datatype_name(type));
  if (type == Datatype::kFp32) return in.fp32;
  std::vector<float> out;
  if (type == Datatype::kFp64) {
    for (size_t i = 0; i < in.fp64.size(); ++i) {
      if (std::isfinite(in.fp64[i]) && std::fabs(in.fp64[i]) > 3.4028234663852886e38)
        throw_error(ErrorKind::kUsage, field + "[" + std::to_string(i) + "]", "is outside float32's range (+-3.4028235e38)");
      out.push_back(static_cast<float>(in.fp64[i]));
    }
    return out;
  }
  constexpr double kExact = 16777216.0;
  for (size_t i = 0; i < in.ints.size(); ++i) {
    const uint64_t v = in.ints[i];
    double x = type == Datatype::kInt64 ? static_cast<double>(static_cast<int64_t>(v))
               : type == Datatype::kInt32 ? static_cast<double>(static_cast<int32_t>(v))
                                          : static_cast<double>(v);
    const double lo = type == Datatype::kUint8 || type == Datatype::kBool ? 0 : -kExact;
    const double hi = type == Datatype::kUint8 ? 255 : type == Datatype::kBool ? 1 : kExact;
    if (x < lo || x > hi)
      throw_error(ErrorKind::kUsage, field + "[" + std::to_string(i) + "]",
                  "is " + std::to_string(static_cast<int64_t>(x)) + "; expected a value in [" +
                      std::to_string(static_cast<int64_t>(lo)) + ", " + std::to_string(static_cast<int64_t>(hi)) +
                      "] (" + datatype_name(type) + " values are computed in float32)");
    out.push_back(static_cast<float>(x));
  }
  return out;
}

struct WireRequest {
  std::string model, version;
  InferRequest request;
  bool raw = false;
};

// A ModelInferRequest as gradmesh's request: names, shapes and counts
// checked, every problem Error(kUsage) naming the field as the JSON parser does.
WireRequest read_infer_request(std::string_view bytes, const RequestLimits& limits) {
  Reader r(bytes, "ModelInferRequest");
  WireRequest out;
  std::vector<WireInput> inputs;
  std::vector<std::string_view> raw;
  for (Field f; r.next(f);) {
    if (f.number == 1) out.model = text(f, r);
    if (f.number == 2) out.version = text(f, r);
    if (f.number == 3) out.request.id = text(f, r);
    if (f.number == 5) {
      if (static_cast<int>(inputs.size()) >= limits.max_inputs)
        throw_error(ErrorKind::kUsage, "inputs", "holds more than " + std::to_string(limits.max_inputs) + " tensors");
      inputs.push_back(read_input(message(f, r), "inputs[" + std::to_string(inputs.size()) + "]"));
    }
    if (f.number == 6) {
      // A view into `bytes`, which outlives the reader (a Reader keeps a view, never a copy).
      Reader o(message(f, r), "outputs[" + std::to_string(out.request.outputs.size()) + "]");
      std::string name;
      for (Field g; o.next(g);)
        if (g.number == 1) name = text(g, o);
      out.request.outputs.push_back(name);
    }
    if (f.number == 7) {
      if (f.type != wire::kLength) r.fail(7, "is not bytes");
      raw.push_back(f.data);
    }
  }
  out.raw = !raw.empty();
  if (out.raw && raw.size() != inputs.size())
    throw_error(ErrorKind::kUsage, "raw_input_contents",
                "holds " + std::to_string(raw.size()) + " entries for " + std::to_string(inputs.size()) +
                    " inputs; expected one per input");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const WireInput& w = inputs[i];
    const std::string where = "inputs[" + std::to_string(i) + "]";
    InferInput in;
    in.name = w.name;
    in.datatype = parse_datatype(w.datatype, where + ".datatype");
    if (w.shape.size() > 8) throw_error(ErrorKind::kUsage, where + ".shape", "has more than 8 dimensions");
    int64_t count = 1;
    for (size_t d = 0; d < w.shape.size(); ++d) {
      const int64_t n = w.shape[d];
      if (n < 0 || n > limits.max_elements || count * std::max<int64_t>(n, 1) > limits.max_elements)
        throw_error(ErrorKind::kUsage, where + ".shape[" + std::to_string(d) + "]",
                    "is " + std::to_string(n) + "; a tensor holds 0 to " + std::to_string(limits.max_elements) +
                        " elements");
      count *= n;
    }
    in.shape = w.shape;
    std::vector<float> values;
    if (out.raw) {
      const std::string field = "raw_input_contents[" + std::to_string(i) + "]";
      const int64_t expected = count * datatype_bytes(in.datatype);
      if (static_cast<int64_t>(raw[i].size()) != expected)
        throw_error(ErrorKind::kUsage, field,
                    "holds " + std::to_string(raw[i].size()) + " bytes; the shape of " + datatype_name(in.datatype) +
                        " needs " + std::to_string(expected));
      values = tensor_from_bytes(raw[i].data(), count, in.datatype, field);
    } else {
      values = typed_values(w, in.datatype, where + ".contents");
      if (static_cast<int64_t>(values.size()) != count)
        throw_error(ErrorKind::kUsage, where + ".contents",
                    "holds " + std::to_string(values.size()) + " " + datatype_name(in.datatype) +
                        " values; the shape needs " + std::to_string(count));
    }
    in.values = Tensor::from_vector(in.shape, values);
    out.request.inputs.push_back(std::move(in));
  }
  return out;
}

std::string infer_response(const InferReply& reply, bool raw) {
  Writer w;
  w.string_field(1, reply.model_name);
  w.string_field(2, reply.model_version);
  w.string_field(3, reply.id);
  std::vector<std::string> raw_outputs;
  for (const InferOutput& o : reply.outputs) {
    Writer t;
    t.string_field(1, o.name);
    t.string_field(2, datatype_name(o.datatype));
    t.packed_int64(3, o.values.shape());
    const float* v = o.values.data();
    const auto n = static_cast<size_t>(o.values.numel());
    Writer contents;
    if (o.datatype == Datatype::kInt64) {
      std::vector<int64_t> ints(n);
      for (size_t i = 0; i < n; ++i) ints[i] = static_cast<int64_t>(std::llround(v[i]));
      if (raw)
        raw_outputs.emplace_back(reinterpret_cast<const char*>(ints.data()), n * 8);
      else
        contents.packed_int64(3, ints);
    } else if (raw) {
      raw_outputs.emplace_back(reinterpret_cast<const char*>(v), n * 4);
    } else {
      contents.packed_fp32(6, v, n);
    }
    if (!raw) t.bytes_field(5, contents.bytes());
    w.bytes_field(5, t.bytes());
  }
  for (const std::string& bytes : raw_outputs) w.bytes_field(6, bytes);
  return w.bytes();
}

// One call: the method's request bytes in, response bytes out, or a status.
class Service final : public grpc::CallbackGenericService {
 public:
  Service(ProtocolCore& core, const GrpcOptions& options) : core_(core), options_(options) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
    return new Call(*this, context);
  }

 private:
  class Call final : public grpc::ServerGenericBidiReactor {
   public:
    Call(Service& service, grpc::GenericCallbackServerContext* context) : service_(service), context_(context) {
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) return Finish({grpc::StatusCode::INVALID_ARGUMENT, "the call carried no request message"});
      std::vector<grpc::Slice> slices;
      std::string bytes;
      if (request_.Dump(&slices).ok())
        for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
      // Answered now, or (ModelInfer) from the batcher's thread once its batch has run.
      service_.answer(*context_, bytes, [this](const grpc::Status& status, const std::string& answer) {
        std::unique_lock<std::mutex> lock(mutex_);
        status_ = status;
        if (!status.ok()) {
          lock.unlock();
          return Finish(status);
        }
        grpc::Slice slice(answer);
        response_ = grpc::ByteBuffer(&slice, 1);
        lock.unlock();
        StartWrite(&response_);
      });
    }
    void OnWriteDone(bool) override {
      std::unique_lock<std::mutex> lock(mutex_);
      const grpc::Status status = status_;
      lock.unlock();
      Finish(status);
    }
    void OnDone() override { delete this; }

   private:
    Service& service_;
    grpc::GenericCallbackServerContext* context_;
    // The answer may come from the batcher's thread and OnWriteDone on a gRPC
    // thread, ordered by gRPC's own queues; the lock makes that order visible
    // to ThreadSanitizer too.
    std::mutex mutex_;
    grpc::ByteBuffer request_, response_;
    grpc::Status status_;
  };

  using Reply = std::function<void(const grpc::Status& status, const std::string& answer)>;

  // Calls `reply` once: now, or for ModelInfer when the batch has run.
  void answer(const grpc::GenericCallbackServerContext& context, const std::string& in, const Reply& reply) {
    std::string out;
    const grpc::Status status = answer_now(context, in, out, reply);
    if (status.error_code() != grpc::StatusCode::DO_NOT_USE) reply(status, out);
  }

  // The answer of any method but ModelInfer; for ModelInfer, the status
  // DO_NOT_USE once the request is with the batcher, which calls `later`.
  grpc::Status answer_now(const grpc::GenericCallbackServerContext& context, const std::string& in, std::string& out,
                          const Reply& later) {
    const std::string prefix = "/inference.GRPCInferenceService/";
    const std::string& method = context.method();
    if (method.rfind(prefix, 0) != 0) return {grpc::StatusCode::UNIMPLEMENTED, "no such service method: " + method};
    const std::string name = method.substr(prefix.size());
    Writer w;
    if (name == "ServerLive") {
      w.bool_field(1, true);
    } else if (name == "ServerReady") {
      w.bool_field(1, core_.ready());
    } else {
      const auto& metadata = context.client_metadata();
      const auto found = metadata.find("authorization");
      const std::string auth = found == metadata.end() ? "" : std::string(found->second.data(), found->second.size());
      if (!core_.authorized(auth))
        return {grpc::StatusCode::UNAUTHENTICATED,
                auth.empty() ? "this server requires the metadata \"authorization: Bearer <token>\""
                             : "the bearer token is not the server's"};
      try {
        if (name == "ServerMetadata") {
          w.string_field(1, "gradmesh");
          w.string_field(2, GRADMESH_VERSION);
        } else if (name == "ModelReady") {
          const auto [model, version] = name_and_version(in, "ModelReadyRequest");
          w.bool_field(1, core_.model(model, version).ready);
        } else if (name == "ModelMetadata") {
          const auto [model, version] = name_and_version(in, "ModelMetadataRequest");
          out = model_metadata(core_.model(model, version));
          return grpc::Status::OK;
        } else if (name == "ModelInfer") {
          WireRequest request;
          try {
            request = read_infer_request(in, options_.limits);
          } catch (const Error& e) {
            throw ProtocolError(400, e.what());
          }
          const bool raw = request.raw;
          core_.infer_async(request.model, request.version, std::move(request.request),
                            [later, raw](InferReply* reply, const ProtocolError* refused) {
                              if (refused) return later(to_status(*refused), "");
                              std::string bytes;
                              try {
                                bytes = infer_response(*reply, raw);
                              } catch (const std::exception& e) {
                                return later({grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what()}, "");
                              }
                              later(grpc::Status::OK, bytes);
                            });
          return {grpc::StatusCode::DO_NOT_USE, ""};
        } else {
          return {grpc::StatusCode::UNIMPLEMENTED, "gradmesh does not serve " + method};
        }
      } catch (const ProtocolError& e) {
        return to_status(e);
      } catch (const Error& e) {
        return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
      } catch (const std::exception& e) {
        return {grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what()};
      }
    }
    out = w.bytes();
    return grpc::Status::OK;
  }

  ProtocolCore& core_;
  GrpcOptions options_;
};

}  // namespace grpc_front_internal

struct GrpcFront::Impl {
  GrpcOptions options;
  grpc_front_internal::Service service;
  std::unique_ptr<grpc::Server> server;
  Impl(ProtocolCore& core, GrpcOptions o) : options(std::move(o)), service(core, options) {}
};

GrpcFront::GrpcFront(ProtocolCore& core, GrpcOptions options) : impl_(std::make_unique<Impl>(core, std::move(options))) {}

GrpcFront::~GrpcFront() { stop(std::chrono::milliseconds(0)); }

int GrpcFront::start() {
  const GrpcOptions& o = impl_->options;
  const std::string address = (o.host == "localhost" ? "127.0.0.1" : o.host) + ":" + std::to_string(o.port);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(o.max_message_bytes, INT32_MAX)));
  builder.RegisterCallbackGenericService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port == 0)
    throw_error(ErrorKind::kIo, "gRPC server on " + address, "cannot listen there (in use, or not an address of this machine)");
  return port;
}

void GrpcFront::stop(std::chrono::milliseconds drain) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + drain);
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace gradmesh::serve
