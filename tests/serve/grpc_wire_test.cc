// The hand-written protobuf codec (serve/grpc_wire.h): values written read
// back, packed and unpacked repeated fields, and hostile bytes refused with
// a message naming the field instead of read past their end.
#include "gradmesh/serve/grpc_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gradmesh/core/error.h"

namespace gradmesh::serve::wire {
namespace {

TEST(GrpcWire, WrittenFieldsReadBack) {
  Writer w;
  w.string_field(1, "tiny");
  w.uint_field(2, 300);
  w.bool_field(3, false);  // a default: left out
  w.packed_int64(4, {-1, 784});
  const float values[3] = {1.5f, -2.0f, 0.25f};
  w.packed_fp32(5, values, 3);
  Reader r(w.bytes(), "Test");
  Field f;
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.number, 1);
  EXPECT_EQ(f.data, "tiny");
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.number, 2);
  EXPECT_EQ(f.varint, 300u);
  ASSERT_TRUE(r.next(f));
  EXPECT_EQ(f.number, 4);
  std::vector<uint64_t> dims;
  r.repeated(f, kVarint, dims);
  ASSERT_EQ(dims.size(), 2u);
  EXPECT_EQ(static_cast<int64_t>(dims[0]), -1);
  EXPECT_EQ(dims[1], 784u);
  ASSERT_TRUE(r.next(f));
  std::vector<uint64_t> bits;
  r.repeated(f, kFixed32, bits);
  ASSERT_EQ(bits.size(), 3u);
  EXPECT_FALSE(r.next(f));

  // Unpacked repeated values (one key each) are read too.
  const std::string unpacked = std::string("\x18\x05\x18\x07", 4);
  Reader u(unpacked, "Test");
  std::vector<uint64_t> got;
  while (u.next(f)) u.repeated(f, kVarint, got);
  EXPECT_EQ(got, (std::vector<uint64_t>{5, 7}));
}

TEST(GrpcWire, HostileBytesAreRefusedNamingTheField) {
  struct Case {
    std::string bytes, expected;
  };
  const std::vector<Case> cases = {
      {std::string("\x0a\x05" "ab", 4), "Test field 1: declares 5 bytes where 2 are left"},
      {std::string("\x08\xff\xff", 3), "Test field 1: ends inside a varint"},
      {std::string("\x08") + std::string(10, '\xff') + "\x01", "Test field 1: has a varint longer than"},
      {std::string("\x0b", 1), "Test field 1: has wire type 3"},
      {std::string("\x00\x01", 2), "Test: has field number 0"},
      {std::string("\x0d\x01\x02", 3), "Test field 1: ends inside a 32-bit value"},
  };
  for (const Case& c : cases) {
    Reader r(c.bytes, "Test");
    Field f;
    try {
      while (r.next(f)) {
      }
      ADD_FAILURE() << "accepted: " << c.expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
  // A packed float field whose length is not a multiple of 4.
  Writer w;
  w.bytes_field(6, "abcde");
  Reader r(w.bytes(), "Test");
  Field f;
  ASSERT_TRUE(r.next(f));
  std::vector<uint64_t> bits;
  EXPECT_THROW(r.repeated(f, kFixed32, bits), Error);
}

}  // namespace
}  // namespace gradmesh::serve::wire
