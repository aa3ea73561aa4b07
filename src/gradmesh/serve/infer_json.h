// The Open Inference Protocol v2 (KServe, Triton) inference request and
// response as JSON:
//
//   request  {"id": "42", "inputs": [{"name": "input", "shape": [2, 784],
//             "datatype": "FP32", "data": [0.0, 0.1, ...]}],
//             "outputs": [{"name": "logits"}]}            ("id", "outputs" optional)
//   response {"model_name": "mlp", "model_version": "1200", "id": "42",
//             "outputs": [{"name": "logits", "shape": [2, 10],
//             "datatype": "FP32", "data": [...]}]}
//
// "data" is row-major, flat or nested as the shape. Parsing is strict: every
// problem is Error(kUsage) naming the field ("inputs[0].shape[1]") and what
// was expected, which the server answers with 400.
//
// The binary tensor data extension: with the HTTP header
// Inference-Header-Content-Length: L, the body's first L bytes are the JSON
// and the rest are raw little-endian tensors, in input order, for each input
// that has "parameters": {"binary_data_size": N} instead of "data". A
// request with "parameters": {"binary_data_output": true} (or an output with
// "parameters": {"binary_data": true}) gets its outputs the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradmesh/core/tensor.h"

namespace gradmesh::serve {

// The datatypes a request may carry; every one is read into float32, the
// models' input type (token ids are exact up to 2^24).
enum class Datatype { kFp32, kFp64, kInt64, kInt32, kUint8, kBool };
const char* datatype_name(Datatype type);  // "FP32", ...
// nullopt-free: Error(kUsage) naming `field` for anything else.
Datatype parse_datatype(const std::string& name, const std::string& field);

struct InferInput {
  std::string name;
  Shape shape;
  Datatype datatype = Datatype::kFp32;
  Tensor values;  // F32, shape `shape`
};

struct InferRequest {
  std::string id;                         // echoed in the response; "" when absent
  std::vector<InferInput> inputs;
  std::vector<std::string> outputs;       // requested outputs by name; empty = all
  bool binary_output = false;             // answer with the binary tensor data extension
  std::vector<std::string> binary_outputs;  // outputs asked for as binary by name
};

// The bytes of one element of `type` in the binary extension.
int64_t datatype_bytes(Datatype type);

// `count` elements of `type` stored little-endian in `bytes` (the binary
// extension's and gRPC's raw tensors), as float32 with the same checks as
// JSON values: Error(kUsage) naming `field` and the element for an integer
// beyond +-2^24, a float beyond float32's range, or a BOOL byte other than 0 or 1.
std::vector<float> tensor_from_bytes(const char* bytes, int64_t count, Datatype type, const std::string& field);
// The same into `out` (count floats).
void tensor_from_bytes(const char* bytes, int64_t count, Datatype type, const std::string& field, float* out);

struct RequestLimits {
  int64_t max_elements = int64_t{1} << 24;  // per input tensor
  int max_inputs = 16;
};

// Parses a request body in one pass, without a document tree: each input's
// values go straight into its tensor, so a request costs its body and its
// tensors' floats (RSS: tests/serve/infer_json_test.cc). Error(kUsage) naming the field for malformed JSON,
// a missing or ill-typed field, an unknown datatype, a negative or huge
// dimension, data whose length is not the shape's product (or whose values
// do not fit the datatype), more than the limits allow.
// `header_length` >= 0: the binary extension's Inference-Header-Content-Length
// (Error(kUsage) naming it when it exceeds the body, or when the binary
// sizes do not add up to the bytes after it); -1: the body is all JSON.
InferRequest parse_infer_request(const std::string& body, const RequestLimits& limits = {},
                                 int64_t header_length = -1);

struct InferOutput {
  std::string name;
  Datatype datatype = Datatype::kFp32;
  Tensor values;  // F32; written as the datatype says (INT64: rounded)
};

std::string infer_response_json(const std::string& model_name, const std::string& model_version,
                                const std::string& id, const std::vector<InferOutput>& outputs);

// The response with the binary extension: outputs named in `binary` (all
// when `all_binary`) carry "parameters": {"binary_data_size": N} and their
// raw bytes follow the JSON; *header_length is the JSON's length.
std::string infer_response_binary(const std::string& model_name, const std::string& model_version,
                                  const std::string& id, const std::vector<InferOutput>& outputs, bool all_binary,
                                  const std::vector<std::string>& binary, int64_t* header_length);

// {"error": "<message>"}
std::string error_json(const std::string& message);

}  // namespace gradmesh::serve
