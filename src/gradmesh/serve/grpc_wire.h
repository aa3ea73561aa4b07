// Protocol Buffers' wire format, written and read by hand for the
// inference protocol's messages (grpc_service.proto).
//
// Why not protoc's generated code: Debian's SentencePiece carries its own
// copy of protobuf (3.14, exported under the same symbol names), and
// linking libprotobuf (3.21) into the same process made SentencePiece's
// version check fail at its first use, so `gradmesh data prepare-text
// --vocab sentencepiece` and the GPT's subword runs broke. The protocol's
// messages are small; this file is the whole codec.
//
// Reading is for hostile input: every length is checked against what is
// left, varints are at most 10 bytes, unknown fields are skipped, and any
// violation is Error(kUsage) naming the message and the field number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::serve::wire {

enum WireType : int { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

class Writer {
 public:
  // Scalars and strings at their proto3 default (0, false, "") are left out.
  void uint_field(int field, uint64_t value);
  void bool_field(int field, bool value) { uint_field(field, value ? 1 : 0); }
  void string_field(int field, std::string_view value);
  // Always written (an element of a repeated bytes or string field, a sub-message).
  void bytes_field(int field, std::string_view value);
  void packed_int64(int field, const std::vector<int64_t>& values);
  void packed_fp32(int field, const float* values, size_t n);
  const std::string& bytes() const { return out_; }

 private:
  void varint(uint64_t value);
  void tag(int field, WireType type) { varint(static_cast<uint64_t>(field) << 3 | type); }
  std::string out_;
};

struct Field {
  int number = 0;
  WireType type = kVarint;
  uint64_t varint = 0;    // kVarint; kFixed64 and kFixed32 as their bits
  std::string_view data;  // kLength
};

class Reader {
 public:
  // `what` names the message in errors, e.g. "ModelInferRequest.inputs[0]".
  Reader(std::string_view bytes, std::string what) : rest_(bytes), what_(std::move(what)) {}
  // A reader keeps a view of its bytes: a temporary string would dangle.
  Reader(std::string&& bytes, std::string what) = delete;
  // The next field; false at the end. Error(kUsage) for malformed bytes.
  bool next(Field& field);
  // The values of a repeated scalar field, packed or not, appended to `out`
  // (varints as uint64; fixed32 and fixed64 as their bits).
  void repeated(const Field& field, WireType element, std::vector<uint64_t>& out) const;
  [[noreturn]] void fail(int field, const std::string& why) const;

 private:
  uint64_t read_varint(std::string_view& from, int field) const;
  std::string_view rest_;
  std::string what_;
};

}  // namespace gradmesh::serve::wire
