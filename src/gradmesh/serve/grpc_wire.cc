#include "gradmesh/serve/grpc_wire.h"

#include <cstring>

#include "gradmesh/core/error.h"

namespace gradmesh::serve::wire {

void Writer::varint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void Writer::uint_field(int field, uint64_t value) {
  if (value == 0) return;
  tag(field, kVarint);
  varint(value);
}

void Writer::string_field(int field, std::string_view value) {
  if (!value.empty()) bytes_field(field, value);
}

void Writer::bytes_field(int field, std::string_view value) {
  tag(field, kLength);
  varint(value.size());
  out_.append(value);
}

void Writer::packed_int64(int field, const std::vector<int64_t>& values) {
  if (values.empty()) return;
  Writer body;
  for (const int64_t v : values) body.varint(static_cast<uint64_t>(v));
  bytes_field(field, body.bytes());
}

void Writer::packed_fp32(int field, const float* values, size_t n) {
  if (n == 0) return;
  tag(field, kLength);
  varint(n * 4);
  out_.append(reinterpret_cast<const char*>(values), n * 4);  // x86: little-endian, as the format
}

void Reader::fail(int field, const std::string& why) const {
  throw_error(ErrorKind::kUsage, what_ + (field > 0 ? " field " + std::to_string(field) : std::string()),
              why + " (malformed protobuf)");
}

uint64_t Reader::read_varint(std::string_view& from, int field) const {
  uint64_t value = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (from.empty()) fail(field, "ends inside a varint");
    const auto byte = static_cast<unsigned char>(from.front());
    from.remove_prefix(1);
    if (shift == 63 && byte > 1) fail(field, "has a varint longer than 64 bits");
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return value;
  }
  fail(field, "has a varint longer than 10 bytes");
}

bool Reader::next(Field& field) {
  if (rest_.empty()) return false;
  const uint64_t key = read_varint(rest_, 0);
  const uint64_t number = key >> 3;
  if (number == 0 || number > (uint64_t{1} << 29) - 1) fail(0, "has field number " + std::to_string(number));
  field = Field{};
  field.number = static_cast<int>(number);
  field.type = static_cast<WireType>(key & 7);
  const auto fixed = [&](size_t n) {
    if (rest_.size() < n) fail(field.number, "ends inside a " + std::to_string(n * 8) + "-bit value");
    uint64_t bits = 0;
    std::memcpy(&bits, rest_.data(), n);
    rest_.remove_prefix(n);
    return bits;
  };
  switch (field.type) {
    case kVarint:
      field.varint = read_varint(rest_, field.number);
      break;
    case kFixed64:
      field.varint = fixed(8);
      break;
    case kFixed32:
      field.varint = fixed(4);
      break;
    case kLength: {
      const uint64_t n = read_varint(rest_, field.number);
      if (n > rest_.size())
        fail(field.number, "declares " + std::to_string(n) + " bytes where " + std::to_string(rest_.size()) +
                               " are left");
      field.data = rest_.substr(0, n);
      rest_.remove_prefix(n);
      break;
    }
    default:
      fail(field.number, "has wire type " + std::to_string(static_cast<int>(field.type)) +
                             " (groups are not part of this protocol)");
  }
  return true;
}

void Reader::repeated(const Field& field, WireType element, std::vector<uint64_t>& out) const {
  if (field.type == element) {
    out.push_back(field.varint);
    return;
  }
  if (field.type != kLength) fail(field.number, "has wire type " + std::to_string(static_cast<int>(field.type)));
  std::string_view packed = field.data;
  if (element == kVarint) {
    while (!packed.empty()) out.push_back(read_varint(packed, field.number));
    return;
  }
  const size_t size = element == kFixed64 ? 8 : 4;
  if (packed.size() % size != 0)
    fail(field.number, "holds " + std::to_string(packed.size()) + " packed bytes, not a multiple of " +
                           std::to_string(size));
  for (size_t at = 0; at < packed.size(); at += size) {
    uint64_t bits = 0;
    std::memcpy(&bits, packed.data() + at, size);
    out.push_back(bits);
  }
}

}  // namespace gradmesh::serve::wire
