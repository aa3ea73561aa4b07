// Malformed safetensors files, built byte by byte: each must end in a
// gradmesh::Error(kFormat) that names the file and says what was wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/safetensors_bytes.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

constexpr const char* kSource = "bad.safetensors";

// A file image: length prefix, `header` verbatim, then `data_bytes` bytes of data.
std::string file_with(const std::string& header, size_t data_bytes) {
  std::string data(data_bytes, '\0');
  for (size_t i = 0; i < data_bytes; ++i) data[i] = static_cast<char>(i * 37 + 1);
  return le64(header.size()) + header + data;
}

SafetensorsFile parse(const std::string& bytes) {
  return parse_safetensors(kSource, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// Returns the message so callers can check more than one fragment.
std::string expect_format_error(const std::string& bytes, const std::string& fragment) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kFormat) << message;
    EXPECT_EQ(message.rfind(std::string(kSource) + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << message;
    return message;
  }
  ADD_FAILURE() << "parsed without error; expected: " << fragment;
  return "";
}

// One valid F32 entry, for cases that break something else.
const std::string kEntry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

TEST(SafetensorsMalformed, ValidBaselineParses) {
  // Guards the helpers: the cases below differ from this by one defect.
  const SafetensorsFile file = parse(file_with("{" + kEntry + "}", 8));
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].tensor.numel(), 2);
}

TEST(SafetensorsMalformed, LengthPrefix) {
  expect_format_error(std::string("\x01\x02\x03", 3), "file is 3 bytes long, shorter than the 8-byte header length");
  expect_format_error("", "file is 0 bytes long");
  expect_format_error(le64(0) + "{}", "header length is 0");
  expect_format_error(le64(100) + "{}", "header length 100 runs past the end of the file (only 2 bytes follow");
  expect_format_error(le64(100'000'001) + "{}", "header length 100000001 exceeds the limit of 100000000 bytes");
  expect_format_error(le64(~uint64_t{0}) + "{}", "exceeds the limit");
}

TEST(SafetensorsMalformed, HeaderJson) {
  expect_format_error(file_with(R"({"w":)", 0), "header is not valid JSON");
  expect_format_error(file_with("[1, 2]", 0), "header starts with byte 0x5b instead of '{'");
  expect_format_error(file_with(" {}", 0), "header starts with byte 0x20");
  expect_format_error(file_with("{} x", 0), "header is not valid JSON");
  expect_format_error(file_with(std::string("{}\0\0", 4), 0), "header contains a NUL byte at offset 2");
  expect_format_error(file_with(std::string("{\"a\0\":1}", 8), 0), "NUL byte at offset 3");
  EXPECT_NO_THROW(parse(file_with("{}\n\t", 0)));  // other JSON whitespace: tolerated, like the reference reader
  expect_format_error(file_with("{\"w\xff\":1}", 0), "header is not valid JSON");  // invalid UTF-8
  expect_format_error(file_with(R"({"w":{"dtype":"F32",}})", 0), "header is not valid JSON");
}

TEST(SafetensorsMalformed, DeepNestingIsRejectedWithoutRecursion) {
  const std::string deep =
      R"({"w":{"dtype":"F32","shape":)" + std::string(200000, '[') + std::string(200000, ']') + "}}";
  expect_format_error(file_with(deep, 0), "more than 3 levels deep");
  const std::string unclosed = "{\"w\":" + std::string(200000, '[');
  expect_format_error(file_with(unclosed, 0), "more than 3 levels deep");
}

TEST(SafetensorsMalformed, DuplicateKeys) {
  expect_format_error(file_with("{" + kEntry + "," + kEntry + "}", 8), "header lists 'w' twice");
  expect_format_error(file_with(R"({"__metadata__":{},"__metadata__":{}})", 0), "header lists '__metadata__' twice");
  expect_format_error(file_with(R"({"w":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                      "header repeats key 'dtype' inside one object");
  expect_format_error(file_with(R"({"__metadata__":{"a":"1","a":"2"}})", 0), "header repeats key 'a'");
}

TEST(SafetensorsMalformed, EntryShape) {
  expect_format_error(file_with(R"({"w":5})", 0), "tensor 'w': entry is number 5; expected an object");
  expect_format_error(file_with(R"({"w":{"dtype":"F32","shape":[2]}})", 8), "tensor 'w': missing key 'data_offsets'");
  expect_format_error(file_with(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
                      "tensor 'w': unexpected key 'x'");
}

TEST(SafetensorsMalformed, DType) {
  auto with_dtype = [](const std::string& dtype) {
    return file_with(R"({"w":{"dtype":)" + dtype + R"(,"shape":[2],"data_offsets":[0,8]}})", 8);
  };
  expect_format_error(with_dtype("32"), "tensor 'w': dtype is 32; expected a string");
  expect_format_error(with_dtype(R"("Q7")"), R"(tensor 'w': dtype "Q7" is not a safetensors dtype)");
  expect_format_error(with_dtype(R"("f32")"), "is not a safetensors dtype");  // case matters
  expect_format_error(with_dtype(R"("F16")"), "tensor 'w': dtype F16 not supported (gradmesh loads F32 and BF16)");
  expect_format_error(with_dtype(R"("I64")"), "dtype I64 not supported");
  expect_format_error(with_dtype(R"("U8")"), "dtype U8 not supported");
}

TEST(SafetensorsMalformed, Shape) {
  auto with_shape = [](const std::string& shape, size_t data_bytes = 8) {
    return file_with(R"({"w":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,8]}})", data_bytes);
  };
  expect_format_error(with_shape("2"), "tensor 'w': shape is 2; expected an array of non-negative integers");
  expect_format_error(with_shape("[-2]"), "shape [-2] has element -2");
  expect_format_error(with_shape("[2.0]"), "shape [2.0] has element 2.0");
  expect_format_error(with_shape(R"(["2"])"), "has element \"2\"");
  expect_format_error(with_shape("[[2]]"), "more than 3 levels deep");
  expect_format_error(with_shape("[4294967296,4294967296]"), "more elements than fit in a 64-bit count");
  expect_format_error(with_shape("[9223372036854775808]"), "more elements than fit");
  expect_format_error(with_shape("[18446744073709551616]"), "has element");  // beyond u64: a float to JSON
  // 2^62 elements fit in the count, but 2^62 * 4 bytes wraps to 0 in 64 bits.
  expect_format_error(with_shape("[4611686018427387904]"), "need more bytes than fit in a 64-bit size");
  expect_format_error(with_shape("[4611686018427387904]", 0), "need more bytes than fit");
}

TEST(SafetensorsMalformed, DataOffsets) {
  auto with_offsets = [](const std::string& offsets, size_t data_bytes) {
    return file_with(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}", data_bytes);
  };
  expect_format_error(with_offsets("[0]", 8), "tensor 'w': data_offsets is [0]; expected [begin, end]");
  expect_format_error(with_offsets("[0,8,8]", 8), "data_offsets is [0,8,8]");
  expect_format_error(with_offsets("[-1,7]", 8), "data_offsets is [-1,7]");
  expect_format_error(with_offsets("{}", 8), "data_offsets is {}");
  expect_format_error(with_offsets("[8,0]", 8), "data_offsets [8, 0] end before they begin");
  expect_format_error(with_offsets("[0,4]", 8), "data_offsets [0, 4] give 4 bytes but dtype F32 and shape [2] need 8");
  expect_format_error(with_offsets("[0,8]", 4),
                      "data_offsets [0, 8] run past the end of the data buffer, which holds 4");
  expect_format_error(with_offsets("[8,16]", 12), "run past the end");

  // The example from the format's documentation, verbatim.
  const std::string message = expect_format_error(
      file_with(R"({"1.weight":{"dtype":"F32","shape":[10,20],"data_offsets":[0,400]}})", 400), "give 400 bytes");
  EXPECT_EQ(message,
            "bad.safetensors: tensor '1.weight': data_offsets [0, 400] give 400 bytes but dtype F32 and shape "
            "[10, 20] need 800");
}

TEST(SafetensorsMalformed, LayoutMustTileTheBuffer) {
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string gap_b = R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]})";
  expect_format_error(file_with("{" + a + "," + gap_b + "}", 16),
                      "bytes [8, 12] of the data buffer belong to no tensor (gap before tensor 'b'");
  expect_format_error(file_with("{" + gap_b + "}", 16), "bytes [0, 12] of the data buffer belong to no tensor");
  const std::string overlap_b = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})";
  expect_format_error(file_with("{" + a + "," + overlap_b + "}", 12),
                      "tensor 'b' at data_offsets [4, 12] overlaps tensor 'a' at data_offsets [0, 8]");
  const std::string same_a = R"("c":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_format_error(file_with("{" + a + "," + same_a + "}", 8), "overlaps tensor");
  expect_format_error(file_with("{" + a + "}", 12), "the data buffer holds 12 bytes but the tensors end at byte 8");
  expect_format_error(file_with("{}", 1), "1 trailing bytes belong to no tensor");
}

TEST(SafetensorsMalformed, Metadata) {
  expect_format_error(file_with(R"({"__metadata__":[]})", 0), "__metadata__ is []; expected an object");
  expect_format_error(file_with(R"({"__metadata__":{"step":3}})", 0), "__metadata__ key 'step' has value 3");
  expect_format_error(file_with(R"({"__metadata__":{"a":{"b":"c"}}})", 0), "__metadata__ key 'a' has value {");
  EXPECT_EQ(parse(file_with(R"({"__metadata__":{"a":"b"}})", 0)).metadata.at("a"), "b");
}

// Every strict prefix of a valid file is invalid (the data must end exactly
// at the end of the file), and every single-byte corruption must either
// parse or fail with gradmesh::Error: never another exception, never a crash.
TEST(SafetensorsMalformed, TruncationAndByteFlipsNeverCrash) {
  const std::string header = R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                             R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";
  const std::string valid = file_with(header + std::string((8 - header.size() % 8) % 8, ' '), 22);
  ASSERT_EQ(parse(valid).tensors.size(), 2u);

  for (size_t length = 0; length < valid.size(); ++length) {
    EXPECT_THROW(parse(valid.substr(0, length)), Error) << "prefix of " << length << " bytes";
  }
  int parsed = 0, rejected = 0;
  for (size_t i = 0; i < valid.size(); ++i) {
    for (unsigned mask : {0x01u, 0x20u, 0x80u, 0xffu}) {
      std::string corrupt = valid;
      corrupt[i] = static_cast<char>(corrupt[i] ^ mask);
      try {
        parse(corrupt);
        ++parsed;
      } catch (const Error&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << i << " ^ " << mask << ": non-gradmesh exception " << e.what();
      }
    }
  }
  // Flips in the data buffer (and some in names/metadata values) still parse; flips in the structure do not.
  EXPECT_GT(parsed, 22 * 4 - 1);
  EXPECT_GT(rejected, 100);
}

}  // namespace
}  // namespace gradmesh::checkpoint
