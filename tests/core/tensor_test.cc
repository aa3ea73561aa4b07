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

}  // namespace
}  // namespace gradmesh
