#include "gradmesh/serve/infer_json.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <functional>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <nlohmann/json.hpp>

#include "gradmesh/core/error.h"
#include "gradmesh/core/json_reader.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::serve {
namespace {

// The binary extension's tensors are little-endian, copied as they are.
static_assert(std::endian::native == std::endian::little, "the binary tensor data extension assumes little-endian");

using Json = nlohmann::json;

constexpr double kExactInFloat = 16777216.0;  // 2^24: integers beyond lose bits in float32

[[noreturn]] void bad_field(const std::string& field, const std::string& what) { throw_error(ErrorKind::kUsage, field, what); }

// The models compute in float32: a finite value beyond its range (3.5e38,
// an FP64 1e300) would become an infinity, and converting it is undefined
// besides. NaN and infinities (binary data only; JSON has none) pass here
// and are the model's to refuse (ServedModel::rows_of).
float to_float32(double x, const std::string& field, std::string_view written = {}) {
  if (std::isinf(x) || (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max()))
    bad_field(field, "is " + (written.empty() ? Json(x).dump() : std::string(written)) +
                         ", outside float32's range (+-3.4028235e38)");
  return static_cast<float>(x);
}

// Where a value of "data" sits, kept as indices and spelled out only for a
// message: thousands of numbers must not cost a string each.
struct DataCursor {
  JsonReader& reader;
  Datatype type;
  const std::string& field;  // "inputs[0].data"
  float* out;
  int64_t count;  // the shape's elements
  int64_t written = 0;
  std::vector<size_t> path;  // the index at each open level

  std::string where(size_t levels) const {
    std::string s = field;
    for (size_t k = 0; k < levels; ++k) s += "[" + std::to_string(path[k]) + "]";
    return s;
  }
  [[noreturn]] void bad(const std::string& what) const { bad_field(where(path.size()), what); }
};

float read_element(DataCursor& c) {
  JsonReader& r = c.reader;
  const JsonKind kind = r.peek();
  switch (c.type) {
    case Datatype::kFp32:
    case Datatype::kFp64: {
      if (kind != JsonKind::kNumber) c.bad("is " + r.describe_value() + "; expected a number");
      std::string_view token;
      const double x = r.read_number(&token);
      if (std::isinf(x) || std::fabs(x) > std::numeric_limits<float>::max())
        to_float32(x, c.where(c.path.size()), token);  // refuses it, naming the element
      return static_cast<float>(x);
    }
    case Datatype::kBool:
      if (kind != JsonKind::kBoolean) c.bad("is " + r.describe_value() + "; expected true or false");
      return r.read_bool() ? 1.0f : 0.0f;
    case Datatype::kInt64:
    case Datatype::kInt32:
    case Datatype::kUint8: {
      if (kind != JsonKind::kNumber) c.bad("is " + r.describe_value() + "; expected an integer");
      const std::string_view token = r.read_number_token();
      if (!JsonReader::is_integer_token(token)) c.bad("is number " + std::string(token) + "; expected an integer");
      const double lo = c.type == Datatype::kUint8 ? 0 : -kExactInFloat, hi = c.type == Datatype::kUint8 ? 255 : kExactInFloat;
      const std::optional<int64_t> x = try_parse_int(token, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
      if (!x)
        c.bad("is " + std::string(token) + "; expected an integer in [" + std::to_string(static_cast<int64_t>(lo)) + ", " +
              std::to_string(static_cast<int64_t>(hi)) + "] (" + datatype_name(c.type) + " values are computed in float32)");
      return static_cast<float>(*x);
    }
  }
  c.bad("has an unknown datatype");
}

// Writes the elements of the value at the reader (flat, or nested `depth`
// levels deep) to c.out, refusing more than c.count.
void read_data(DataCursor& c, int depth) {
  if (c.reader.peek() != JsonKind::kArray) {
    c.out[c.written++] = read_element(c);
    return;
  }
  if (depth <= 0) c.bad("is nested deeper than the shape");
  c.reader.begin_array();
  c.path.push_back(0);
  for (; c.reader.next_element(); ++c.path.back()) {
    if (c.written >= c.count) bad_field(c.where(c.path.size() - 1), "holds more elements than the shape");
    read_data(c, depth - 1);
  }
  c.path.pop_back();
}

// The binary part of a request: what is left of it, consumed input by input.
struct BinaryData {
  const char* at = nullptr;
  int64_t left = -1;  // -1: no binary part
};

std::string shape_json(const Shape& shape) { return Json(shape).dump(); }

Shape read_shape(JsonReader& r, const std::string& where, const RequestLimits& limits, int64_t* count) {
  if (r.peek() != JsonKind::kArray) bad_field(where + ".shape", "expected an array of at most 8 dimensions");
  Shape shape;
  *count = 1;
  r.begin_array();
  for (size_t d = 0; r.next_element(); ++d) {
    const std::string field = where + ".shape[" + std::to_string(d) + "]";
    if (d >= 8) bad_field(where + ".shape", "expected an array of at most 8 dimensions");
    const std::string text = r.peek() == JsonKind::kNumber ? std::string(r.read_number_token()) : r.describe_value();
    const std::optional<int64_t> n = try_parse_int(text, 0, limits.max_elements);
    if (!n) bad_field(field, "is " + text + "; expected an integer from 0 to " + std::to_string(limits.max_elements));
    shape.push_back(*n);
    *count *= *n;
    if (*count > limits.max_elements)
      bad_field(where + ".shape", "has more than " + std::to_string(limits.max_elements) + " elements (the server's limit)");
  }
  return shape;
}

// An input tensor's object. Its "data" is read straight into the tensor once
// "shape" and "datatype" are known; when it comes before them, it is
// checked, skipped, and read from its offset afterwards.
InferInput parse_input(JsonReader& r, const std::string& where, const RequestLimits& limits, BinaryData& binary) {
  if (r.peek() != JsonKind::kObject)
    bad_field(where, "is " + r.describe_value() + "; expected an object {name, shape, datatype, data}");
  InferInput in;
  bool has_name = false, has_datatype = false, has_shape = false, has_data = false;
  std::optional<std::string> binary_size;  // the token, as written
  std::optional<size_t> data_at;
  int64_t count = 0;
  Tensor values;
  auto read_values = [&](JsonReader& from) {
    values = Tensor::empty(in.shape);
    const std::string field = where + ".data";
    DataCursor c{from, in.datatype, field, values.data(), count, 0, {}};
    read_data(c, static_cast<int>(in.shape.size()));
    if (c.written != count)
      bad_field(field, "holds " + std::to_string(c.written) + " elements; the shape " + shape_json(in.shape) +
                           " needs " + std::to_string(count));
  };
  r.begin_object();
  for (std::string key; r.next_member(key);) {
    if (key == "name") {
      if (r.peek() != JsonKind::kString) bad_field(where + ".name", "expected a non-empty string");
      in.name = r.read_string();
      if (in.name.empty()) bad_field(where + ".name", "expected a non-empty string");
      has_name = true;
    } else if (key == "datatype") {
      if (r.peek() != JsonKind::kString)
        bad_field(where + ".datatype", "is " + r.describe_value() + "; expected a string such as \"FP32\"");
      in.datatype = parse_datatype(r.read_string(), where + ".datatype");
      has_datatype = true;
    } else if (key == "shape") {
      in.shape = read_shape(r, where, limits, &count);
      has_shape = true;
    } else if (key == "parameters") {
      if (r.peek() != JsonKind::kObject) bad_field(where + ".parameters", "expected an object");
      r.begin_object();
      for (std::string p; r.next_member(p);) {
        if (p == "binary_data_size")
          binary_size = r.peek() == JsonKind::kNumber ? std::string(r.read_number_token()) : r.describe_value();
        else
          r.skip_value();
      }
    } else if (key == "data") {
      has_data = true;
      if (has_shape && has_datatype && !binary_size) {
        read_values(r);
      } else {
        r.peek();
        data_at = r.offset();
        r.skip_value();
      }
    } else {
      r.skip_value();
    }
  }
  if (!has_name) bad_field(where + ".name", "is missing");
  if (!has_datatype) bad_field(where + ".datatype", "is missing");
  if (!has_shape) bad_field(where + ".shape", "is missing");
  if (binary_size) {
    const std::string field = where + ".parameters.binary_data_size";
    if (has_data) bad_field(where + ".data", "is given beside parameters.binary_data_size; send one of the two");
    if (binary.left < 0) bad_field(field, "needs the Inference-Header-Content-Length header (the binary tensor data extension)");
    const int64_t expected = count * datatype_bytes(in.datatype);
    if (try_parse_int(*binary_size, 0, kInt64Max) != expected)
      bad_field(field, "is " + *binary_size + "; the shape " + shape_json(in.shape) + " of " + datatype_name(in.datatype) +
                           " needs " + std::to_string(expected) + " bytes");
    if (expected > binary.left)
      bad_field(field, "is " + std::to_string(expected) + " bytes, but only " + std::to_string(binary.left) +
                           " binary bytes are left in the body");
    values = Tensor::empty(in.shape);
    tensor_from_bytes(binary.at, count, in.datatype, where, values.data());
    binary.at += expected;
    binary.left -= expected;
  } else if (!has_data) {
    bad_field(where + ".data", "is missing");
  } else if (data_at) {
    JsonReader later = r.at(*data_at);
    read_values(later);
  }
  in.values = std::move(values);
  return in;
}

// The request's "outputs": [{"name": ..., "parameters": {"binary_data": true}}].
void parse_outputs(JsonReader& r, InferRequest& request) {
  if (r.peek() != JsonKind::kArray) bad_field("outputs", "is " + r.describe_value() + "; expected an array of {name}");
  r.begin_array();
  for (size_t i = 0; r.next_element(); ++i) {
    const std::string where = "outputs[" + std::to_string(i) + "]";
    if (r.peek() != JsonKind::kObject) bad_field(where, "is " + r.describe_value() + "; expected an object {name}");
    std::optional<std::string> name;
    bool binary = false;
    r.begin_object();
    for (std::string key; r.next_member(key);) {
      if (key == "name") {
        if (r.peek() != JsonKind::kString) bad_field(where + ".name", "expected a string");
        name = r.read_string();
      } else if (key == "parameters") {
        if (r.peek() != JsonKind::kObject)
          bad_field(where + ".parameters", "expected an object whose binary_data is true or false");
        r.begin_object();
        for (std::string p; r.next_member(p);) {
          if (p != "binary_data") {
            r.skip_value();
            continue;
          }
          if (r.peek() != JsonKind::kBoolean)
            bad_field(where + ".parameters", "expected an object whose binary_data is true or false");
          binary = r.read_bool();
        }
      } else {
        r.skip_value();
      }
    }
    if (!name) bad_field(where + ".name", "is missing");
    request.outputs.push_back(*name);
    if (binary) request.binary_outputs.push_back(*name);
  }
}

void parse_request_parameters(JsonReader& r, InferRequest& request) {
  if (r.peek() != JsonKind::kObject) bad_field("parameters", "is " + r.describe_value() + "; expected an object");
  r.begin_object();
  for (std::string key; r.next_member(key);) {
    if (key != "binary_data_output") {
      r.skip_value();
      continue;
    }
    if (r.peek() != JsonKind::kBoolean)
      bad_field("parameters.binary_data_output", "is " + r.describe_value() + "; expected true or false");
    request.binary_output = r.read_bool();
  }
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
void tensor_from_bytes(const char* bytes, int64_t count, Datatype type, const std::string& field, float* out) {
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
    // NaN and infinities pass (the model refuses them, naming the element);
    // a finite value beyond float32's range does not.
    if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max())
      to_float32(x, field + " element " + std::to_string(i));
    out[i] = static_cast<float>(x);
  }
}

std::vector<float> tensor_from_bytes(const char* bytes, int64_t count, Datatype type, const std::string& field) {
  std::vector<float> out(static_cast<size_t>(count));
  tensor_from_bytes(bytes, count, type, field, out.data());
  return out;
}

InferRequest parse_infer_request(const std::string& body, const RequestLimits& limits, int64_t header_length) {
  BinaryData binary;
  if (header_length > static_cast<int64_t>(body.size()))
    bad_field("Inference-Header-Content-Length", "is " + std::to_string(header_length) + ", longer than the body's " +
                                               std::to_string(body.size()) + " bytes");
  std::string_view json = body;
  if (header_length >= 0) {
    binary.at = body.data() + header_length;
    binary.left = static_cast<int64_t>(body.size()) - header_length;
    json = json.substr(0, static_cast<size_t>(header_length));
  }
  InferRequest r;
  JsonReader reader(json);
  try {
    if (reader.peek() != JsonKind::kObject)
      bad_field("request body", "is " + reader.describe_value() + "; expected a JSON object with \"inputs\"");
    bool has_id = false, has_inputs = false, has_outputs = false, has_parameters = false;
    auto once = [](bool& seen, const char* key) {
      if (seen) bad_field(key, "appears twice in the request");
      seen = true;
    };
    reader.begin_object();
    for (std::string key; reader.next_member(key);) {
      if (key == "id") {
        once(has_id, "id");
        if (reader.peek() != JsonKind::kString) bad_field("id", "is " + reader.describe_value() + "; expected a string");
        r.id = reader.read_string();
      } else if (key == "inputs") {
        once(has_inputs, "inputs");
        if (reader.peek() != JsonKind::kArray) bad_field("inputs", "expected a non-empty array of input tensors");
        reader.begin_array();
        for (size_t i = 0; reader.next_element(); ++i) {
          if (static_cast<int>(i) >= limits.max_inputs)
            bad_field("inputs", "has more than " + std::to_string(limits.max_inputs) + " tensors (the server's limit)");
          r.inputs.push_back(parse_input(reader, "inputs[" + std::to_string(i) + "]", limits, binary));
        }
        if (r.inputs.empty()) bad_field("inputs", "expected a non-empty array of input tensors");
      } else if (key == "outputs") {
        once(has_outputs, "outputs");
        parse_outputs(reader, r);
      } else if (key == "parameters") {
        once(has_parameters, "parameters");
        parse_request_parameters(reader, r);
      } else {
        reader.skip_value();
      }
    }
    reader.expect_end();
    if (!has_inputs) bad_field("request.inputs", "is missing");
  } catch (const JsonSyntaxError& e) {
    bad_field("request body", std::string("is not valid JSON: ") + e.what());
  }
  if (binary.left > 0)
    bad_field("request body", std::to_string(binary.left) + " binary bytes after the JSON belong to no input's "
                        "parameters.binary_data_size");
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
