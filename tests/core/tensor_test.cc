#include <gtest/gtest.h>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/tensor.h"

namespace gradmesh {
namespace {

TEST(Tensor, ShapeAndAlignment) {
  Tensor t = Tensor::zeros({3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.dim(-1), 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  for (float v : t.to_vector()) EXPECT_EQ(v, 0.0f);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor flat = Tensor::from_vector({6}, {0, 1, 2, 3, 4, 5});
  Tensor tail = flat.slice_flat(2, {2, 2});
  tail.data()[0] = 42;
  EXPECT_EQ(flat.data()[2], 42);
  EXPECT_EQ(flat.view({2, 3}).dim(0), 2);
  EXPECT_THROW(flat.view({4, 2}), Error);
  EXPECT_THROW(flat.slice_flat(5, {2}), Error);
}

TEST(Tensor, Bf16RoundTrip) {
  Tensor t = Tensor::from_vector({4}, {1.0f, -2.5f, 3.14159f, 1e-3f});
  std::vector<float> back = t.to(DType::kBF16).to(DType::kF32).to_vector();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_NEAR(back[2], 3.14159f, 3.14159f / 128);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // Round to nearest even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
}

// The error a call threw, or "(none)".
template <class F>
std::string shape_error(F call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShape) << e.what();
    return e.what();
  }
  return "(none)";
}

TEST(Tensor, ShapesTooLargeToCountAreErrorsNotWrappedSizes) {
  const int64_t big = int64_t{1} << 40;
  // 2^80 elements: an unchecked product wraps to 0 and yields an empty tensor.
  EXPECT_EQ(shape_error([&] { shape_numel({big, big}); }),
            "shape [1099511627776, 1099511627776]: holds more elements than a 64-bit count (2^63 - 1); a dimension "
            "is far too large");
  EXPECT_NE(shape_error([&] { Tensor::empty({big, big}); }).find("shape [1099511627776, 1099511627776]"),
            std::string::npos);
  EXPECT_EQ(shape_error([&] { shape_numel({3, -2}); }), "shape [3, -2]: negative dimension -2");
  // A zero dimension makes the shape empty, however large the rest.
  EXPECT_EQ(shape_numel({big, big, 0}), 0);
}

TEST(Tensor, ByteSizesTooLargeForSizeTAreErrors) {
  // 2^62 float32 elements are 2^64 bytes: the count fits, the byte size does not.
  const Shape huge = {int64_t{1} << 62};
  EXPECT_EQ(shape_numel(huge), int64_t{1} << 62);
  EXPECT_EQ(shape_error([&] { shape_nbytes(huge, DType::kF32); }),
            "shape [4611686018427387904]: needs more bytes of F32 than a 64-bit size holds");
  EXPECT_NE(shape_error([&] { Tensor::empty(huge); }).find("needs more bytes of F32"), std::string::npos);
  EXPECT_EQ(shape_nbytes({3, 5}, DType::kBF16), 30);
}

TEST(Tensor, SliceBeyondTheEndIsAnErrorEvenWhenTheEndOverflows) {
  Tensor flat = Tensor::zeros({6});
  EXPECT_NE(shape_error([&] { flat.slice_flat(int64_t{1} << 62, {int64_t{1} << 62}); }).find("run outside a tensor of 6"),
            std::string::npos);
}

}  // namespace
}  // namespace gradmesh
