// The Open Inference Protocol's JSON request and response: well-formed
// requests read into tensors (flat or nested data, every datatype), every
// malformed one is refused with the field it concerns, and responses parse
// back with the values they were given.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace gradmesh::serve
