// bf16 products with float32 accumulation (kernels/gemm_bf16.h) against a
// float64 reference of the same bf16-rounded operands: every transpose,
// leading dimensions wider than the rows (NaN in the padding, which no read
// may touch), alpha and beta, one row, an empty sum. gemm() under
// MatmulPrecision::kBf16 is the same product on float32 operands.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "kernels/nan.h"

namespace gradmesh::kernels {
namespace {

// `rows` x `cols` values in [-1, 1), rounded to bf16, stored with leading dimension ld (NaN past cols).
std::vector<float> bf16_exact_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t step) {
  const CounterRng rng(23, RngPurpose::kTest, step);
  std::vector<float> m(static_cast<size_t>(rows * ld), testing::kNaN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      m[static_cast<size_t>(r * ld + c)] = bf16_to_float(float_to_bf16(2.0f * rng.uniform(r * cols + c) - 1.0f));
  return m;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> out;
  for (const float v : values) out.push_back(float_to_bf16(v));
  return out;
}

struct Bf16Case {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
};

// |got - want| within float32 accumulation of k products of magnitude <= 1:
// k * 2^-23 relative to the sum of |a||b|, with room for a blocked order.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t m, int64_t n, int64_t ldc,
                  int64_t k, const std::string& what) {
  const double bound = 4.0 * static_cast<double>(k + 1) * std::ldexp(1.0, -23) * static_cast<double>(k + 2);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float g = got[static_cast<size_t>(i * ldc + j)], w = want[static_cast<size_t>(i * ldc + j)];
      ASSERT_TRUE(std::isfinite(g)) << what << " (" << i << ", " << j << ")";
      ASSERT_LE(std::abs(static_cast<double>(g) - w), bound) << what << " (" << i << ", " << j << ")";
    }
}

TEST(GemmBf16, MatchesADoubleReferenceOfTheRoundedOperands) {
  const std::vector<Bf16Case> cases = {
      {false, false, 64, 48, 96, 1.0f, 0.0f}, {true, false, 33, 17, 70, 1.0f, 0.0f},
      {false, true, 5, 129, 31, 1.0f, 1.0f},  {true, true, 40, 40, 40, 0.5f, -2.0f},
      {false, false, 1, 300, 257, 1.0f, 0.0f}, {false, true, 1, 64, 784, 1.0f, 1.0f}};
  uint64_t step = 0;
  for (const Bf16Case& t : cases) {
    const std::string what = std::string(t.trans_a ? "T" : "N") + (t.trans_b ? "T" : "N") + " " +
                              std::to_string(t.m) + "x" + std::to_string(t.n) + "x" + std::to_string(t.k);
    const int64_t a_rows = t.trans_a ? t.k : t.m, a_cols = t.trans_a ? t.m : t.k;
    const int64_t b_rows = t.trans_b ? t.n : t.k, b_cols = t.trans_b ? t.k : t.n;
    const int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = t.n + 2;
    const std::vector<float> a = bf16_exact_matrix(a_rows, a_cols, lda, ++step);
    const std::vector<float> b = bf16_exact_matrix(b_rows, b_cols, ldb, ++step);
    const std::vector<float> c0 = bf16_exact_matrix(t.m, t.n, ldc, ++step);
    std::vector<float> want = c0;
    gemm_reference(t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, want.data(), ldc);

    std::vector<float> got = c0;
    const std::vector<uint16_t> a16 = to_bf16(a), b16 = to_bf16(b);
    gemm_bf16(t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, a16.data(), lda, b16.data(), ldb, t.beta, got.data(), ldc);
    expect_close(got, want, t.m, t.n, ldc, t.k, "gemm_bf16 " + what);

    std::vector<float> through_gemm = c0;
    set_matmul_precision(MatmulPrecision::kBf16);
    gemm(t.trans_a, t.trans_b, t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, through_gemm.data(), ldc);
    set_matmul_precision(MatmulPrecision::kFp32);
    // gemm() under kBf16 is gemm_bf16 of the rounded operands, bit for bit.
    for (int64_t i = 0; i < t.m; ++i)
      for (int64_t j = 0; j < t.n; ++j)
        ASSERT_EQ(through_gemm[static_cast<size_t>(i * ldc + j)], got[static_cast<size_t>(i * ldc + j)])
            << what << " (" << i << ", " << j << ")";
    // The padding of C is left alone.
    for (int64_t i = 0; i < t.m; ++i) ASSERT_TRUE(std::isnan(got[static_cast<size_t>(i * ldc + t.n)])) << what;
  }
}

// Ranks that are threads of one process, and a server's inference threads,
// multiply at once: each product is the one it would be alone.
TEST(GemmBf16, ThreadsMultiplyingAtOnceGetTheirOwnResults) {
  constexpr int kThreads = 4;
  // A Linear's forward: x [m, k] times w [n, k] transposed (oneDNN reorders w in its scratchpad).
  constexpr int64_t m = 128, n = 256, k = 784;
  std::vector<std::vector<uint16_t>> a(kThreads), b(kThreads);
  std::vector<std::vector<float>> alone(kThreads), together(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    a[t] = to_bf16(bf16_exact_matrix(m, k, k, 100 + t));
    b[t] = to_bf16(bf16_exact_matrix(n, k, k, 200 + t));
    alone[t].assign(m * n, 0.0f);
    gemm_bf16(false, true, m, n, k, 1.0f, a[t].data(), k, b[t].data(), k, 0.0f, alone[t].data(), n);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      together[t].assign(m * n, 0.0f);
      for (int round = 0; round < 20; ++round)
        gemm_bf16(false, true, m, n, k, 1.0f, a[t].data(), k, b[t].data(), k, 0.0f, together[t].data(), n);
    });
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(together[t], alone[t]) << "thread " << t;
}

TEST(GemmBf16, Float32OperandsAreRoundedToNearestEven) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: it rounds to
  // the even one, 1. 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  const std::vector<float> a = {1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8)};
  const std::vector<float> b = {1.0f, 1.0f};
  float c = 0;
  set_matmul_precision(MatmulPrecision::kBf16);
  gemm(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, &c, 1);
  set_matmul_precision(MatmulPrecision::kFp32);
  EXPECT_EQ(c, 1.0f + (1.0f + std::ldexp(1.0f, -6)));
  gemm(false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, &c, 1);
  EXPECT_EQ(c, a[0] + a[1]) << "float32 is untouched";
}

TEST(GemmBf16, AnEmptySumScalesC) {
  std::vector<float> c = {1.0f, -2.0f, 3.0f, 4.0f};
  gemm_bf16(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{0.5f, -1.0f, 1.5f, 2.0f}));
  gemm_bf16(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>(4, 0.0f)));
}

TEST(GemmBf16, SupportIsNamed) {
  const Bf16Support s = bf16_support();
  EXPECT_FALSE(s.isa.empty());
  EXPECT_NE(s.describe().find(s.isa), std::string::npos) << s.describe();
  // Without bf16 dot products the products go through OpenBLAS, and the sentence says so.
  EXPECT_EQ(s.onednn, s.native);
  EXPECT_EQ(s.describe().find("OpenBLAS") != std::string::npos, !s.native) << s.describe();
}

}  // namespace
}  // namespace gradmesh::kernels
