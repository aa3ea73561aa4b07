// Round trips, exact bytes and the listing of safetensors files.
#include "gradmesh/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/safetensors_bytes.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.file(name); }

  static std::string read_bytes(const std::string& file) { return gradmesh::testing::read_file(file); }

  gradmesh::testing::TempDir scratch_;
  const std::string& dir_ = scratch_.path();
};

// Little-endian bytes of float32 values, spelled out by hand in the tests.
std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    char b[4];
    std::memcpy(b, &v, 4);
    out.append(b, 4);
  }
  return out;
}

SafetensorsFile parse_string(const std::string& bytes) {
  return parse_safetensors("mem.safetensors", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST_F(SafetensorsTest, RoundTripF32KeepsValuesNamesOrderAndMetadata) {
  std::vector<NamedTensor> tensors = {
      {"1.weight", Tensor::from_vector({2, 3}, {0.1f, -2.5f, 3.0f, 1e-8f, -0.0f, 123456.0f})},
      {"1.bias", Tensor::from_vector({3}, {1, 2, 3})},
      {"0.weight", Tensor::from_vector({1}, {-7.25f})},  // deliberately not sorted by name
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "42"}};
  write_safetensors(path("m.safetensors"), tensors, metadata);

  const SafetensorsFile file = read_safetensors(path("m.safetensors"));
  ASSERT_EQ(file.tensors.size(), 3u);
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].name, tensors[i].name);
    EXPECT_EQ(file.tensors[i].tensor.dtype(), DType::kF32);
    EXPECT_EQ(file.tensors[i].tensor.shape(), tensors[i].tensor.shape());
    EXPECT_EQ(file.tensors[i].tensor.to_vector(), tensors[i].tensor.to_vector());  // bit-exact
  }
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_NE(file.find("1.bias"), nullptr);
  EXPECT_EQ(file.find("1.bias")->to_vector(), std::vector<float>({1, 2, 3}));
  EXPECT_EQ(file.find("2.weight"), nullptr);
}

TEST_F(SafetensorsTest, RoundTripBf16RoundsToNearestAndKeepsBf16Tensors) {
  const std::vector<float> values = {1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f, -1.0f / 3.0f};
  const Tensor already_bf16 = Tensor::from_vector({2}, {0.5f, 1.75f}).to(DType::kBF16);
  write_safetensors(path("b.safetensors"), {{"w", Tensor::from_vector({2, 3}, values)}, {"b", already_bf16}}, {},
                    DType::kBF16);

  const SafetensorsFile file = read_safetensors(path("b.safetensors"));
  ASSERT_EQ(file.tensors.size(), 2u);
  const Tensor& w = file.tensors[0].tensor;
  ASSERT_EQ(w.dtype(), DType::kBF16);
  EXPECT_EQ(w.shape(), Shape({2, 3}));
  const auto* raw = static_cast<const uint16_t*>(w.raw());
  const std::vector<float> back = w.to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(raw[i], float_to_bf16(values[i])) << i;
    EXPECT_LE(std::fabs(back[i] - values[i]), std::fabs(values[i]) / 256.0f) << i;  // 8-bit mantissa
  }
  EXPECT_EQ(file.tensors[1].tensor.dtype(), DType::kBF16);
  EXPECT_EQ(file.tensors[1].tensor.to_vector(), std::vector<float>({0.5f, 1.75f}));

  // A bf16 tensor stays bf16 even when the file stores float32.
  write_safetensors(path("mixed.safetensors"), {{"b", already_bf16}, {"f", Tensor::full({1}, 2.0f)}});
  const SafetensorsFile mixed = read_safetensors(path("mixed.safetensors"));
  EXPECT_EQ(mixed.tensors[0].tensor.dtype(), DType::kBF16);
  EXPECT_EQ(mixed.tensors[1].tensor.dtype(), DType::kF32);
}

TEST_F(SafetensorsTest, WritesExactBytes) {
  write_safetensors(
      path("t.safetensors"),
      {{"1.weight", Tensor::from_vector({2}, {1.0f, -2.0f})}, {"1.bias", Tensor::from_vector({1}, {0.5f})}},
      {{"format", "pt"}});
  // 151 bytes of JSON + 1 space of padding = 152 = 0x98.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("1.weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("1.bias":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}} )";
  std::string expected("\x98\0\0\0\0\0\0\0", 8);
  expected += header;
  expected += std::string("\x00\x00\x80\x3f", 4);  // 1.0f
  expected += std::string("\x00\x00\x00\xc0", 4);  // -2.0f
  expected += std::string("\x00\x00\x00\x3f", 4);  // 0.5f
  EXPECT_EQ(read_bytes(path("t.safetensors")), expected);
  EXPECT_EQ((expected.size() - 12) % 8, 0u);  // data starts 8-byte aligned
}

TEST_F(SafetensorsTest, Bf16BytesAreTopHalvesOfFloats) {
  write_safetensors(path("h.safetensors"), {{"x", Tensor::from_vector({2}, {1.0f, -2.0f})}}, {}, DType::kBF16);
  const std::string json = R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  ASSERT_EQ(json.size(), 55u);  // one space of padding makes 56
  const std::string expected = le64(56) + json + " " + std::string("\x80\x3f\x00\xc0", 4);
  EXPECT_EQ(read_bytes(path("h.safetensors")), expected);
}

// Byte vectors from the reference implementation's own serialization tests
// (the code behind safetensors.torch.save_file): our writer must produce the
// same bytes and our reader must accept them.
TEST_F(SafetensorsTest, MatchesReferenceImplementationBytes) {
  const std::string data = f32_bytes({0, 1, 2, 3, 4, 5});
  struct Case {
    std::string name;
    Shape shape;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"attn.0", {1, 2, 3}, le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + data},
      {"attn0",
       {1, 1, 2, 3},
       le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + std::string(7, ' ') + data},
  };
  for (const Case& c : cases) {
    const std::string file = path(c.name + ".safetensors");
    write_safetensors(file, {{c.name, Tensor::from_vector(c.shape, {0, 1, 2, 3, 4, 5})}});
    EXPECT_EQ(read_bytes(file), c.expected) << c.name;
    const SafetensorsFile parsed = parse_string(c.expected);
    ASSERT_EQ(parsed.tensors.size(), 1u);
    EXPECT_EQ(parsed.tensors[0].tensor.shape(), c.shape);
    EXPECT_EQ(parsed.tensors[0].tensor.to_vector(), std::vector<float>({0, 1, 2, 3, 4, 5}));
  }

  write_safetensors(path("empty.safetensors"), {});
  EXPECT_EQ(read_bytes(path("empty.safetensors")), le64(8) + "{}" + std::string(6, ' '));
  write_safetensors(path("meta.safetensors"), {}, {{"framework", "pt"}});
  const std::string meta = le64(40) + R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' ');
  EXPECT_EQ(read_bytes(path("meta.safetensors")), meta);
  EXPECT_EQ(parse_string(meta).metadata.at("framework"), "pt");
  EXPECT_TRUE(parse_string(meta).tensors.empty());
}

TEST_F(SafetensorsTest, ReaderAcceptsAnyHeaderOrderPaddingAndEmptyTensors) {
  // Header order differs from offset order; a scalar and a zero-size tensor;
  // padding spaces after the JSON. Tensors come back in offset order.
  const std::string header = R"({"b":{"dtype":"F32","shape":[],"data_offsets":[8,12]},)"
                             R"("__metadata__":{},"e":{"dtype":"BF16","shape":[0,5],"data_offsets":[12,12]},)"
                             R"("a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}   )";
  const std::string bytes =
      le64(header.size()) + header + std::string("\x80\x3f\x00\x40\x40\x40\x80\x40", 8) + f32_bytes({-1.5f});
  const SafetensorsFile file = parse_string(bytes);
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].name, "a");
  EXPECT_EQ(file.tensors[0].tensor.to_vector(), std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(file.tensors[1].name, "b");
  EXPECT_EQ(file.tensors[1].tensor.ndim(), 0);
  EXPECT_EQ(file.tensors[1].tensor.to_vector(), std::vector<float>({-1.5f}));
  EXPECT_EQ(file.tensors[2].name, "e");
  EXPECT_EQ(file.tensors[2].tensor.numel(), 0);
  EXPECT_TRUE(file.metadata.empty());
}

TEST_F(SafetensorsTest, NamesWithQuotesAndUnicodeAreEscapedAndRoundTrip) {
  const std::string name = "layer\"q\\\x01.w\xc3\xa9";  // quote, backslash, control char, e-acute
  write_safetensors(path("n.safetensors"), {{name, Tensor::full({1}, 3.0f)}}, {{"note", "tab\there"}});
  const std::string bytes = read_bytes(path("n.safetensors"));
  EXPECT_NE(bytes.find(R"("layer\"q\\\u0001.w)"
                       "\xc3\xa9\""),
            std::string::npos);
  EXPECT_NE(bytes.find(R"("note":"tab\there")"), std::string::npos);
  const SafetensorsFile file = read_safetensors(path("n.safetensors"));
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].name, name);
  EXPECT_EQ(file.metadata.at("note"), "tab\there");
}

TEST_F(SafetensorsTest, WriterRejectsBadInputWithoutTouchingTheFile) {
  const std::string file = path("w.safetensors");
  write_safetensors(file, {{"a", Tensor::full({2}, 1.0f)}});
  const std::string before = read_bytes(file);
  auto expect_internal = [&](const std::vector<NamedTensor>& tensors, const std::string& fragment) {
    try {
      write_safetensors(file, tensors);
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_internal({{"a", Tensor::full({1}, 1.0f)}, {"a", Tensor::full({1}, 2.0f)}}, "name given twice");
  expect_internal({{"a", Tensor()}}, "undefined");
  expect_internal({{"__metadata__", Tensor::full({1}, 1.0f)}}, "reserved");
  expect_internal({{"bad\xff", Tensor::full({1}, 1.0f)}}, "not valid UTF-8");
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, ReadErrorsNameThePath) {
  try {
    read_safetensors(path("missing.safetensors"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(std::string(e.what()).rfind(path("missing.safetensors") + ": ", 0), 0u) << e.what();
  }
  try {
    read_safetensors(dir_);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  std::ofstream(path("short.safetensors"), std::ios::binary) << "abc";
  try {
    read_safetensors(path("short.safetensors"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_EQ(std::string(e.what()).rfind(path("short.safetensors") + ": file is 3 bytes long", 0), 0u) << e.what();
  }
}

TEST_F(SafetensorsTest, WriteErrorsNameThePath) {
  const std::string missing_dir = path("no/such/dir/model.safetensors");
  try {
    write_safetensors(missing_dir, {{"w", Tensor::full({1}, 1.0f)}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(std::string(e.what()).rfind(missing_dir + ": ", 0), 0u) << e.what();
  }
}

TEST_F(SafetensorsTest, DescribeListsTensorsMetadataAndTotals) {
  SafetensorsFile file;
  file.tensors.push_back({"fc1.weight", Tensor::from_vector({2, 3}, {-1, 0, 1, 2, 3, 4})});
  file.tensors.push_back({"fc1.bias", Tensor::from_vector({2}, {0.5f, NAN}).to(DType::kBF16)});
  file.tensors.push_back({"empty", Tensor::zeros({0})});
  file.metadata = {{"format", "pt"}};
  const std::string text = describe_safetensors(file);

  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 7u) << text;
  EXPECT_EQ(lines[0].rfind("name", 0), 0u);
  // Text columns left-aligned, numbers right-aligned, two spaces between columns.
  EXPECT_EQ(lines[1], "fc1.weight  F32    [2, 3]         6     24   -1    4   1.5");
  EXPECT_EQ(lines[2], "fc1.bias    BF16   [2]            2      4  0.5  0.5   0.5  1 non-finite");
  EXPECT_EQ(lines[3], "empty       F32    [0]            0      0    -    -     -");
  EXPECT_EQ(lines[4], "metadata:");
  EXPECT_EQ(lines[5], "  format: pt");
  EXPECT_EQ(lines[6], "total: 3 tensors, 8 parameters, 28 bytes");
}

}  // namespace
}  // namespace gradmesh::checkpoint
