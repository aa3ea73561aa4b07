#include "gradmesh/serve/infer_json.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <functional>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "gradmesh/core/error.h"

namespace gradmesh::serve {
namespace {

// The binary extension's tensors are little-endian, copied as they are.
static_assert(std::endian::native == std::endian::little, "the binary tensor data extension assumes little-endian");

using Json = nlohmann::json;

constexpr double kExactInFloat = 16777216.0;  // 2^24: integers beyond lose bits in float32

[[noreturn]] void bad_field(const std::string& field, const std::string& what) { throw_error(ErrorKind::kUsage, field, what); }

std::string type_text(const Json& v) {
  const std::string dump = v.dump();
  return std::string(v.type_name()) + (dump.size() <= 40 ? " " + dump : "");
}

const Json& member(const Json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) bad_field(where + "." + key, "is missing");
  return *it;
}

// The models compute in float32: a finite value beyond its range (3.5e38,
// an FP64 1e300) would become an infinity, and converting it is undefined
// besides. NaN and infinities (binary data only; JSON has none) pass here
// and are the model's to refuse (ServedModel::rows_of).
float to_float32(double x, const std::string& field) {
  if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max())
    bad_field(field, "is " + Json(x).dump() + ", outside float32's range (+-3.4028235e38)");
  return static_cast<float>(x);
}

float element(const Json& v, Datatype type, const std::string& field) {
  switch (type) {
    case Datatype::kFp32:
    case Datatype::kFp64:
      if (!v.is_number()) bad_field(field, "is " + type_text(v) + "; expected a number");
      return to_float32(v.get<double>(), field);
    case Datatype::kBool:
      if (!v.is_boolean()) bad_field(field, "is " + type_text(v) + "; expected true or false");
      return v.get<bool>() ? 1.0f : 0.0f;
    case Datatype::kInt64:
    case Datatype::kInt32:
    case Datatype::kUint8: {
      if (!v.is_number_integer()) bad_field(field, "is " + type_text(v) + "; expected an integer");
      const double x = v.is_number_unsigned() ? static_cast<double>(v.get<uint64_t>()) : static_cast<double>(v.get<int64_t>());
      const double lo = type == Datatype::kUint8 ? 0 : -kExactInFloat, hi = type == Datatype::kUint8 ? 255 : kExactInFloat;
      if (x < lo || x > hi)
        bad_field(field, "is " + v.dump() + "; expected an integer in [" + std::to_string(static_cast<int64_t>(lo)) + ", " +
                       std::to_string(static_cast<int64_t>(hi)) + "] (" + datatype_name(type) +
                       " values are computed in float32)");
      return static_cast<float>(x);
    }
  }
  bad_field(field, "has an unknown datatype");
}

// Appends the elements of `data` (flat, or nested `depth` levels deep) to `out`.
void flatten(const Json& data, Datatype type, const std::string& field, int depth, int64_t limit,
             std::vector<float>& out) {
  if (!data.is_array()) {
    out.push_back(element(data, type, field));
    return;
  }
  if (depth <= 0) bad_field(field, "is nested deeper than the shape");
  for (size_t i = 0; i < data.size(); ++i) {
    if (static_cast<int64_t>(out.size()) >= limit) bad_field(field, "holds more elements than the shape");
    flatten(data[i], type, field + "[" + std::to_string(i) + "]", depth - 1, limit, out);
  }
}

// The binary part of a request: what is left of it, consumed input by input.
struct BinaryData {
  const char* at = nullptr;
  int64_t left = -1;  // -1: no binary part
};

InferInput parse_input(const Json& j, const std::string& where, const RequestLimits& limits, BinaryData& binary) {
  if (!j.is_object()) bad_field(where, "is " + type_text(j) + "; expected an object {name, shape, datatype, data}");
  InferInput in;
  const Json& name = member(j, "name", where);
  if (!name.is_string() || name.get<std::string>().empty()) bad_field(where + ".name", "expected a non-empty string");
  in.name = name.get<std::string>();
  const Json& datatype = member(j, "datatype", where);
  if (!datatype.is_string()) bad_field(where + ".datatype", "is " + type_text(datatype) + "; expected a string such as \"FP32\"");
  in.datatype = parse_datatype(datatype.get<std::string>(), where + ".datatype");
  const Json& shape = member(j, "shape", where);
  if (!shape.is_array() || shape.size() > 8) bad_field(where + ".shape", "expected an array of at most 8 dimensions");
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const std::string field = where + ".shape[" + std::to_string(d) + "]";
    if (!shape[d].is_number_integer() || shape[d].get<double>() < 0 || shape[d].get<double>() > limits.max_elements)
      bad_field(field, "is " + shape[d].dump() + "; expected an integer from 0 to " + std::to_string(limits.max_elements));
    const auto n = shape[d].get<int64_t>();
    in.shape.push_back(n);
    count *= n;
    if (count > limits.max_elements)
      bad_field(where + ".shape", "has more than " + std::to_string(limits.max_elements) + " elements (the server's limit)");
  }
  std::vector<float> values;
  const auto params = j.find("parameters");
  if (params != j.end() && !params->is_object()) bad_field(where + ".parameters", "expected an object");
  const auto binary_size = params == j.end() ? params : params->find("binary_data_size");
  if (params != j.end() && binary_size != params->end()) {
    const std::string field = where + ".parameters.binary_data_size";
    if (j.contains("data")) bad_field(where + ".data", "is given beside parameters.binary_data_size; send one of the two");
    if (binary.left < 0) bad_field(field, "needs the Inference-Header-Content-Length header (the binary tensor data extension)");
    const int64_t expected = count * datatype_bytes(in.datatype);
    if (!binary_size->is_number_integer() || binary_size->get<double>() != static_cast<double>(expected))
      bad_field(field, "is " + binary_size->dump() + "; the shape " + shape.dump() + " of " + datatype_name(in.datatype) +
                     " needs " + std::to_string(expected) + " bytes");
    if (expected > binary.left)
      bad_field(field, "is " + std::to_string(expected) + " bytes, but only " + std::to_string(binary.left) +
                     " binary bytes are left in the body");
    values = tensor_from_bytes(binary.at, count, in.datatype, where);
    binary.at += expected;
    binary.left -= expected;
  } else {
    const Json& data = member(j, "data", where);
    values.reserve(static_cast<size_t>(count));
    flatten(data, in.datatype, where + ".data", static_cast<int>(in.shape.size()), count, values);
    if (static_cast<int64_t>(values.size()) != count)
      bad_field(where + ".data", "holds " + std::to_string(values.size()) + " elements; the shape " + shape.dump() +
                               " needs " + std::to_string(count));
  }
  in.values = Tensor::from_vector(in.shape.empty() ? Shape{} : in.shape, values);
  return in;
}

}  // namespace

const char* datatype_name(Datatype type) {
  switch (type) {
    case Datatype::kFp32: return "FP32";
    case Datatype::kFp64: return "FP64";
    case Datatype::kInt64: return "INT64";
    case Datatype::kInt32: return "INT32";
    case Datatype::kUint8: return "UINT8";
    case Datatype::kBool: return "BOOL";
  }
  return "?";
}

int64_t datatype_bytes(Datatype type) {
  switch (type) {
    case Datatype::kFp64:
    case Datatype::kInt64: return 8;
    case Datatype::kFp32:
    case Datatype::kInt32: return 4;
    case Datatype::kUint8:
    case Datatype::kBool: return 1;
  }
  return 4;
}

Datatype parse_datatype(const std::string& name, const std::string& field) {
  for (Datatype t : {Datatype::kFp32, Datatype::kFp64, Datatype::kInt64, Datatype::kInt32, Datatype::kUint8,
                     Datatype::kBool})
    if (name == datatype_name(t)) return t;
  bad_field(field, "is \"" + name + "\"; expected FP32, FP64, INT64, INT32, UINT8 or BOOL");
}

// Reads `count` elements of `type` from `bytes` (little-endian) as floats,
// with the same range checks as JSON values.
std::vector<float> tensor_from_bytes(const char* bytes, int64_t count, Datatype type, const std::string& field) {
  std::vector<float> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const char* at = bytes + i * datatype_bytes(type);
    double x = 0;
    switch (type) {
      case Datatype::kFp32: { float v; std::memcpy(&v, at, 4); x = v; break; }
      case Datatype::kFp64: { double v; std::memcpy(&v, at, 8); x = v; break; }
      case Datatype::kInt64: { int64_t v; std::memcpy(&v, at, 8); x = static_cast<double>(v); break; }
      case Datatype::kInt32: { int32_t v; std::memcpy(&v, at, 4); x = v; break; }
      case Datatype::kUint8: x = static_cast<unsigned char>(*at); break;
      case Datatype::kBool:
        if (*at != 0 && *at != 1) bad_field(field, "element " + std::to_string(i) + " is a BOOL byte other than 0 or 1");
        x = *at;
        break;
    }
    const bool integer = type == Datatype::kInt64 || type == Datatype::kInt32;
    if (integer && std::fabs(x) > kExactInFloat)
      bad_field(field, "element " + std::to_string(i) + " is " + std::to_string(static_cast<int64_t>(x)) +
                     "; integers are computed in float32, exact within +-16777216");
    out[static_cast<size_t>(i)] = to_float32(x, field + " element " + std::to_string(i));
  }
  return out;
}

InferRequest parse_infer_request(const std::string& body, const RequestLimits& limits, int64_t header_length) {
  BinaryData binary;
  if (header_length > static_cast<int64_t>(body.size()))
    bad_field("Inference-Header-Content-Length", "is " + std::to_string(header_length) + ", longer than the body's " +
                                               std::to_string(body.size()) + " bytes");
  if (header_length >= 0) {
    binary.at = body.data() + header_length;
    binary.left = static_cast<int64_t>(body.size()) - header_length;
  }
  Json j;
  try {
    j = header_length >= 0 ? Json::parse(body.begin(), body.begin() + header_length) : Json::parse(body);
  } catch (const Json::exception& e) {
    bad_field("request body", std::string("is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad_field("request body", "is " + type_text(j) + "; expected a JSON object with \"inputs\"");
  InferRequest r;
  if (const auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) bad_field("id", "is " + type_text(*id) + "; expected a string");
    r.id = id->get<std::string>();
  }
  const Json& inputs = member(j, "inputs", "request");
  if (!inputs.is_array() || inputs.empty()) bad_field("inputs", "expected a non-empty array of input tensors");
  if (static_cast<int>(inputs.size()) > limits.max_inputs)
    bad_field("inputs", "has " + std::to_string(inputs.size()) + " tensors; at most " + std::to_string(limits.max_inputs));
  for (size_t i = 0; i < inputs.size(); ++i)
    r.inputs.push_back(parse_input(inputs[i], "inputs[" + std::to_string(i) + "]", limits, binary));
  if (binary.left > 0)
    bad_field("request body", std::to_string(binary.left) + " binary bytes after the JSON belong to no input's "
                        "parameters.binary_data_size");
  if (const auto params = j.find("parameters"); params != j.end()) {
    if (!params->is_object()) bad_field("parameters", "is " + type_text(*params) + "; expected an object");
    if (const auto b = params->find("binary_data_output"); b != params->end()) {
      if (!b->is_boolean()) bad_field("parameters.binary_data_output", "is " + type_text(*b) + "; expected true or false");
      r.binary_output = b->get<bool>();
    }
  }
  if (const auto outputs = j.find("outputs"); outputs != j.end()) {
    if (!outputs->is_array()) bad_field("outputs", "is " + type_text(*outputs) + "; expected an array of {name}");
    for (size_t i = 0; i < outputs->size(); ++i) {
      const Json& o = (*outputs)[i];
      const std::string where = "outputs[" + std::to_string(i) + "]";
      if (!o.is_object()) bad_field(where, "is " + type_text(o) + "; expected an object {name}");
      const Json& name = member(o, "name", where);
      if (!name.is_string()) bad_field(where + ".name", "expected a string");
      r.outputs.push_back(name.get<std::string>());
      if (const auto params = o.find("parameters"); params != o.end()) {
        const auto b = params->is_object() ? params->find("binary_data") : params->end();
        if (!params->is_object() || (b != params->end() && !b->is_boolean()))
          bad_field(where + ".parameters", "expected an object whose binary_data is true or false");
        if (b != params->end() && b->get<bool>()) r.binary_outputs.push_back(name.get<std::string>());
      }
    }
  }
  return r;
}

namespace {

// The response's JSON; the outputs `as_binary` says carry their
// binary_data_size instead of data, and their raw bytes go to `raw`.
// Written by hand: floats in their shortest exact form (std::to_chars), not as doubles.
std::string response_json(const std::string& model_name, const std::string& model_version, const std::string& id,
                          const std::vector<InferOutput>& outputs,
                          const std::function<bool(const std::string& name)>& as_binary, std::string* raw) {
  auto quoted = [](const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); };
  std::string out = "{\"model_name\":" + quoted(model_name) + ",\"model_version\":" + quoted(model_version);
  if (!id.empty()) out += ",\"id\":" + quoted(id);
  out += ",\"outputs\":[";
  char number[32];
  for (size_t k = 0; k < outputs.size(); ++k) {
    const InferOutput& o = outputs[k];
    out += (k ? ",{" : "{") + std::string("\"name\":") + quoted(o.name) + ",\"datatype\":\"" +
           datatype_name(o.datatype) + "\",\"shape\":" + Json(o.values.shape()).dump();
    const float* v = o.values.data();
    const bool integer = o.datatype == Datatype::kInt64 || o.datatype == Datatype::kInt32;
    if (as_binary(o.name)) {
      const size_t before = raw->size();
      for (int64_t i = 0; i < o.values.numel(); ++i) {
        if (o.datatype == Datatype::kInt64) {
          const int64_t x = std::lround(v[i]);
          raw->append(reinterpret_cast<const char*>(&x), sizeof x);
        } else if (o.datatype == Datatype::kInt32) {
          const auto x = static_cast<int32_t>(std::lround(v[i]));
          raw->append(reinterpret_cast<const char*>(&x), sizeof x);
        } else {
          raw->append(reinterpret_cast<const char*>(&v[i]), sizeof(float));
        }
      }
      out += ",\"parameters\":{\"binary_data_size\":" + std::to_string(raw->size() - before) + "}}";
      continue;
    }
    out += ",\"data\":[";
    for (int64_t i = 0; i < o.values.numel(); ++i) {
      if (i) out += ',';
      if (!std::isfinite(v[i])) {
        out += "null";  // JSON has no NaN or infinity
        continue;
      }
      const auto r = integer ? std::to_chars(number, number + sizeof(number), static_cast<int64_t>(std::lround(v[i])))
                             : std::to_chars(number, number + sizeof(number), v[i]);
      out.append(number, r.ptr);
    }
    out += "]}";
  }
  return out + "]}";
}

}  // namespace

std::string infer_response_json(const std::string& model_name, const std::string& model_version,
                                const std::string& id, const std::vector<InferOutput>& outputs) {
  return response_json(model_name, model_version, id, outputs, [](const std::string&) { return false; }, nullptr);
}

std::string infer_response_binary(const std::string& model_name, const std::string& model_version,
                                  const std::string& id, const std::vector<InferOutput>& outputs, bool all_binary,
                                  const std::vector<std::string>& binary, int64_t* header_length) {
  std::string raw;
  const std::string header = response_json(
      model_name, model_version, id, outputs,
      [&](const std::string& name) {
        return all_binary || std::find(binary.begin(), binary.end(), name) != binary.end();
      },
      &raw);
  *header_length = static_cast<int64_t>(header.size());
  return header + raw;
}

std::string error_json(const std::string& message) {
  // A message may quote a client's bytes: never fail on invalid UTF-8.
  return Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace gradmesh::serve
