// The Open Inference Protocol's JSON request and response: well-formed
// requests read into tensors (flat or nested data, every datatype), every
// malformed one is refused with the field it concerns, and responses parse
// back with the values they were given.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <tuple>

#include "gradmesh/core/error.h"
#include "gradmesh/serve/infer_json.h"

namespace gradmesh::serve {
namespace {

TEST(InferJson, RequestsReadIntoTensorsFlatOrNested) {
  const InferRequest r = parse_infer_request(
      R"({"id": "q1", "inputs": [{"name": "input", "shape": [2, 3], "datatype": "FP32",
          "data": [[1, 2.5, 3], [4, 5, 6]]}], "outputs": [{"name": "logits"}]})");
  EXPECT_EQ(r.id, "q1");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].name, "input");
  EXPECT_EQ(r.inputs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(r.inputs[0].values.to_vector(), (std::vector<float>{1, 2.5f, 3, 4, 5, 6}));
  EXPECT_EQ(r.outputs, (std::vector<std::string>{"logits"}));
  const InferRequest flat =
      parse_infer_request(R"({"inputs": [{"name": "t", "shape": [1, 4], "datatype": "INT64", "data": [0, 7, 12, 3]}]})");
  EXPECT_EQ(flat.inputs[0].datatype, Datatype::kInt64);
  EXPECT_EQ(flat.inputs[0].values.to_vector(), (std::vector<float>{0, 7, 12, 3}));
  EXPECT_EQ(parse_infer_request(R"({"inputs": [{"name": "b", "shape": [2], "datatype": "BOOL", "data": [true, false]}]})")
                .inputs[0].values.to_vector(),
            (std::vector<float>{1, 0}));
}

TEST(InferJson, EveryMalformedRequestNamesItsField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "request body: is not valid JSON"},
      {"[1]", "request body: is array"},
      {"{}", "request.inputs: is missing"},
      {R"({"inputs": []})", "inputs: expected a non-empty array"},
      {R"({"id": 3, "inputs": [1]})", "id: is number"},
      {R"({"inputs": [1]})", "inputs[0]: is number"},
      {R"({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]})", "inputs[0].name: is missing"},
      {R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}]})", "inputs[0].datatype: is missing"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP16", "data": [1]}]})",
       "inputs[0].datatype: is \"FP16\"; expected FP32"},
      {R"({"inputs": [{"name": "x", "datatype": "FP32", "data": [1]}]})", "inputs[0].shape: is missing"},
      {R"({"inputs": [{"name": "x", "shape": [2, -1], "datatype": "FP32", "data": [1]}]})", "inputs[0].shape[1]: is -1"},
      {R"({"inputs": [{"name": "x", "shape": [1.5], "datatype": "FP32", "data": [1]}]})", "inputs[0].shape[0]: is 1.5"},
      {R"({"inputs": [{"name": "x", "shape": [4096, 4096, 4], "datatype": "FP32", "data": [1]}]})",
       "inputs[0].shape: has more than 16777216 elements"},
      {R"({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32"}]})", "inputs[0].data: is missing"},
      {R"({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2]}]})",
       "inputs[0].data: holds 2 elements; the shape [3] needs 3"},
      {R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2, 3]}]})",
       "holds more elements than the shape"},
      {R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [[1], [2]]}]})",
       "inputs[0].data[0]: is nested deeper than the shape"},
      {R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, "2"]}]})",
       "inputs[0].data[1]: is string"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [1.5]}]})",
       "inputs[0].data[0]: is number 1.5; expected an integer"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [99999999]}]})",
       "expected an integer in [-16777216, 16777216]"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "UINT8", "data": [256]}]})", "in [0, 255]"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "BOOL", "data": [1]}]})", "expected true or false"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": {}})",
       "outputs: is object"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": [{}]})",
       "outputs[0].name: is missing"},
  };
  for (const auto& [body, expected] : cases) {
    try {
      parse_infer_request(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << body;
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << body << "\n  -> " << e.what();
    }
  }
  RequestLimits two;
  two.max_inputs = 1;
  EXPECT_THROW(parse_infer_request(R"({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32", "data": [1]},
                                                  {"name": "b", "shape": [1], "datatype": "FP32", "data": [1]}]})",
                                   two),
               Error);
}

TEST(InferJson, ResponsesParseBackWithTheirValues) {
  const Tensor logits = Tensor::from_vector({2, 2}, {0.1f, -2.5f, 1e-7f, 1.0f / 0.0f});
  const Tensor classes = Tensor::from_vector({2}, {0, 1});
  const std::string text = infer_response_json("m\"1", "7", "req", {{"logits", Datatype::kFp32, logits},
                                                                     {"class", Datatype::kInt64, classes}});
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["model_name"], "m\"1");
  EXPECT_EQ(j["model_version"], "7");
  EXPECT_EQ(j["id"], "req");
  ASSERT_EQ(j["outputs"].size(), 2u);
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(j["outputs"][0]["datatype"], "FP32");
  // Floats in their shortest exact form: they read back to the same float.
  EXPECT_EQ(static_cast<float>(j["outputs"][0]["data"][0].get<double>()), 0.1f);
  EXPECT_EQ(static_cast<float>(j["outputs"][0]["data"][2].get<double>()), 1e-7f);
  EXPECT_TRUE(j["outputs"][0]["data"][3].is_null()) << "JSON has no infinity";
  EXPECT_EQ(j["outputs"][1]["data"], nlohmann::json({0, 1}));
  EXPECT_TRUE(j["outputs"][1]["data"][1].is_number_integer());
  EXPECT_EQ(nlohmann::json::parse(error_json("bad \xff byte"))["error"].get<std::string>().rfind("bad ", 0), 0u);
}

// The binary tensor data extension: raw little-endian tensors after the JSON.
std::string binary_request(const std::string& json, const std::string& raw, int64_t* header_length) {
  *header_length = static_cast<int64_t>(json.size());
  return json + raw;
}

template <class T>
std::string raw_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

TEST(InferJson, BinaryTensorsReadAfterTheJsonHeader) {
  int64_t n = 0;
  const std::string body = binary_request(
      R"({"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
                    {"name": "t", "shape": [3], "datatype": "INT64", "parameters": {"binary_data_size": 24}},
                    {"name": "j", "shape": [1], "datatype": "FP32", "data": [7]}],
          "parameters": {"binary_data_output": true}, "outputs": [{"name": "a", "parameters": {"binary_data": true}}]})",
      raw_of(std::vector<float>{1.5f, -2, 0, 8}) + raw_of(std::vector<int64_t>{4, 0, 9}), &n);
  const InferRequest r = parse_infer_request(body, {}, n);
  ASSERT_EQ(r.inputs.size(), 3u);
  EXPECT_EQ(r.inputs[0].values.to_vector(), (std::vector<float>{1.5f, -2, 0, 8}));
  EXPECT_EQ(r.inputs[1].values.to_vector(), (std::vector<float>{4, 0, 9}));
  EXPECT_EQ(r.inputs[2].values.to_vector(), (std::vector<float>{7}));
  EXPECT_TRUE(r.binary_output);
  EXPECT_EQ(r.binary_outputs, (std::vector<std::string>{"a"}));

  const std::string one_float =
      R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]})";
  struct Bad {
    std::string json, raw;
    int64_t header_extra;  // added to the JSON's length; no header at all when below -1000
    std::string expected;
  };
  const std::vector<Bad> cases = {
      {one_float, raw_of(std::vector<float>{1}), 10 + 4, "longer than the body"},
      {one_float, raw_of(std::vector<float>{1}), -2000, "needs the Inference-Header-Content-Length header"},
      {one_float, "", 0, "only 0 binary bytes are left"},
      {one_float, raw_of(std::vector<float>{1, 2}), 0, "4 binary bytes after the JSON belong to no input"},
      {R"({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]})",
       raw_of(std::vector<float>{1}), 0, "the shape [2] of FP32 needs 8 bytes"},
      {R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1], "parameters": {"binary_data_size": 4}}]})",
       raw_of(std::vector<float>{1}), 0, "is given beside parameters.binary_data_size"},
      {R"({"inputs": [{"name": "b", "shape": [1], "datatype": "BOOL", "parameters": {"binary_data_size": 1}}]})",
       std::string(1, '\x02'), 0, "a BOOL byte other than 0 or 1"},
      {R"({"inputs": [{"name": "t", "shape": [1], "datatype": "INT64", "parameters": {"binary_data_size": 8}}]})",
       raw_of(std::vector<int64_t>{int64_t{1} << 40}), 0, "exact within +-16777216"},
  };
  std::vector<std::tuple<std::string, int64_t, std::string>> bad;
  for (const Bad& c : cases)
    bad.emplace_back(c.json + c.raw, c.header_extra < -1000 ? -1 : static_cast<int64_t>(c.json.size()) + c.header_extra,
                     c.expected);
  for (const auto& [text, header, expected] : bad) {
    try {
      parse_infer_request(text, {}, header);
      ADD_FAILURE() << "accepted " << text.substr(0, 60);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(InferJson, BinaryResponsesCarryTheirSizesAndRawValues) {
  const Tensor logits = Tensor::from_vector({1, 3}, {0.5f, -1, 2});
  const Tensor classes = Tensor::from_vector({1}, {2});
  int64_t header = 0;
  const std::string body = infer_response_binary(
      "m", "4", "", {{"logits", Datatype::kFp32, logits}, {"class", Datatype::kInt64, classes}}, false, {"logits"}, &header);
  const nlohmann::json j = nlohmann::json::parse(body.substr(0, static_cast<size_t>(header)));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 12);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  EXPECT_EQ(j["outputs"][1]["data"], nlohmann::json({2}));
  ASSERT_EQ(body.size(), static_cast<size_t>(header) + 12);
  std::vector<float> values(3);
  std::memcpy(values.data(), body.data() + header, 12);
  EXPECT_EQ(values, (std::vector<float>{0.5f, -1, 2}));
}

}  // namespace
}  // namespace gradmesh::serve
