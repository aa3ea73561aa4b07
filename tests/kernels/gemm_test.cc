#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "kernels/nan.h"

namespace gradmesh::kernels {
namespace {

using testing::kNaN;

std::vector<float> random_gemm_values(size_t n, uint64_t step) {
  const CounterRng rng(11, RngPurpose::kTest, step);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * rng.uniform(i) - 1.0f;
  return v;
}

// A row-major [rows, cols] matrix stored with leading dimension ld >= cols;
// the padding columns hold NaN so that any read of them poisons the result.
std::vector<float> padded_matrix(int64_t rows, int64_t cols, int64_t ld, uint64_t step) {
  const std::vector<float> values = random_gemm_values(static_cast<size_t>(rows * cols), step);
  std::vector<float> m(static_cast<size_t>(rows * ld), kNaN);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[r * ld + c] = values[r * cols + c];
  return m;
}

struct GemmCase {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra elements per row beyond the width (leading dimension = width + pad)
};

// Runs gemm and gemm_reference on the same inputs and compares every element of C,
// including that the padding of C is left untouched.
void expect_matches_reference(const GemmCase& c) {
  SCOPED_TRACE(::testing::Message() << "trans_a=" << c.trans_a << " trans_b=" << c.trans_b << " m=" << c.m
                                    << " n=" << c.n << " k=" << c.k << " alpha=" << c.alpha << " beta=" << c.beta
                                    << " pad=" << c.pad);
  // Stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k].
  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  const std::vector<float> a = padded_matrix(a_rows, a_cols, lda, 1);
  const std::vector<float> b = padded_matrix(b_rows, b_cols, ldb, 2);
  std::vector<float> c_fast = padded_matrix(c.m, c.n, ldc, 3);
  if (c.beta == 0.0f)  // beta == 0 must ignore C entirely, NaN included
    for (int64_t r = 0; r < c.m; ++r)
      for (int64_t j = 0; j < c.n; ++j) c_fast[r * ldc + j] = kNaN;
  std::vector<float> c_ref = c_fast;
  gemm(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, c_fast.data(), ldc);
  gemm_reference(c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, c_ref.data(),
                 ldc);
  // |a|, |b| <= 1, so each dot product has magnitude <= k; float32 accumulation of k terms
  // errs by at most about k * 2^-24 * k; 1e-5 * (k + 1) covers it while an indexing error is O(1).
  const float tol = 1e-5f * static_cast<float>(c.k + 1) * (std::fabs(c.alpha) + std::fabs(c.beta));
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      const float got = c_fast[r * ldc + j], want = c_ref[r * ldc + j];
      ASSERT_TRUE(std::isfinite(want)) << "reference read padding or C at (" << r << ", " << j << ")";
      ASSERT_NEAR(got, want, tol) << "at (" << r << ", " << j << ")";
    }
    for (int64_t j = c.n; j < ldc; ++j) ASSERT_TRUE(std::isnan(c_fast[r * ldc + j])) << "padding of C was written";
  }
}

TEST(Gemm, MatchesReferenceForAllTransposesAndOddSizes) {
  const int64_t sizes[] = {1, 3, 17, 65};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes) expect_matches_reference({ta, tb, m, n, k, 1.0f, 0.0f, 0});
}

TEST(Gemm, AlphaAndBetaScaleProductAndExistingC) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      expect_matches_reference({ta, tb, 17, 3, 65, 0.5f, -1.5f, 0});
      expect_matches_reference({ta, tb, 3, 65, 17, -2.0f, 1.0f, 0});
      expect_matches_reference({ta, tb, 65, 17, 1, 1.0f, 0.25f, 0});
      expect_matches_reference({ta, tb, 1, 65, 17, 0.5f, -1.5f, 0});  // one row: the matrix-vector path
    }
}

TEST(Gemm, BetaZeroIgnoresNaNInC) {
  // expect_matches_reference fills C with NaN whenever beta == 0.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      expect_matches_reference({ta, tb, 17, 17, 17, 1.0f, 0.0f, 0});
      expect_matches_reference({ta, tb, 3, 65, 17, 0.75f, 0.0f, 5});
    }
}

TEST(Gemm, LeadingDimensionsLargerThanWidth) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t pad : {1, 7}) {
        expect_matches_reference({ta, tb, 17, 3, 65, 1.0f, 0.0f, pad});
        expect_matches_reference({ta, tb, 3, 17, 1, 0.5f, 2.0f, pad});
        expect_matches_reference({ta, tb, 65, 65, 3, 1.0f, 1.0f, pad});
        expect_matches_reference({ta, tb, 1, 17, 65, 1.0f, 0.5f, pad});
      }
}

TEST(Gemm, SubmatrixOfALargerMatrix) {
  // The top-left 2x2 block of a 3x4 matrix times the identity: the leading dimension selects rows.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<float> eye = {1, 0, 0, 1};
  std::vector<float> c(4, kNaN);
  gemm(false, false, 2, 2, 2, 1.0f, a.data(), 4, eye.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 5, 6}));
  // The same block read transposed: A^T [2, 2] from a stored [2, 2] block with lda 4.
  gemm(true, false, 2, 2, 2, 1.0f, a.data(), 4, eye.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{1, 5, 2, 6}));
}

TEST(Gemm, HandComputedProduct) {
  // [1 2 3; 4 5 6] * [1 0; 0 1; 1 1] = [4 5; 10 11]
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};
  std::vector<float> c = {100, 200, 300, 400};
  gemm(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.5f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{54, 105, 160, 211}));
}

TEST(Gemm, NumThreadsRoundTrips) {
  const int before = num_threads();
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  expect_matches_reference({false, true, 65, 17, 65, 1.0f, 0.0f, 0});
  set_num_threads(before);
}

// train.threads = 0 is documented to take GRADMESH_NUM_THREADS, else all cores.
TEST(Gemm, ZeroThreadsReadsGradmeshNumThreads) {
  const int before = num_threads();
  setenv("GRADMESH_NUM_THREADS", "3", 1);
  set_num_threads(0);
  EXPECT_EQ(num_threads(), 3);
  unsetenv("GRADMESH_NUM_THREADS");
  set_num_threads(0);
  EXPECT_EQ(num_threads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  for (const char* bad : {"0", "-2", "1025", "four", "2x", " 2"}) {
    setenv("GRADMESH_NUM_THREADS", bad, 1);
    try {
      set_num_threads(0);
      ADD_FAILURE() << "no error for GRADMESH_NUM_THREADS='" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
      EXPECT_NE(std::string(e.what()).find("GRADMESH_NUM_THREADS"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
  unsetenv("GRADMESH_NUM_THREADS");
  set_num_threads(before);
}

}  // namespace
}  // namespace gradmesh::kernels

namespace gradmesh::kernels {
namespace {

// Serving's batches of a few rows go through oneDNN's matmul only while
// serving turns that on: close to the reference at every layout, alpha and
// beta; switched off, gemm() is sgemm bit for bit.
TEST(FastSmallBatches, OneDnnForAFewRowsOnlyWhenServingTurnsItOn) {
  ASSERT_FALSE(fast_small_batches()) << "off by default: training's products stay OpenBLAS's";
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const int64_t m : {2, 7, 64}) {
        const int64_t n = 37, k = 301;
        const int64_t lda = (trans_a ? m : k) + 3, ldb = (trans_b ? k : n) + 2, ldc = n + 1;
        const std::vector<float> a = padded_matrix(trans_a ? k : m, trans_a ? m : k, lda, 11);
        const std::vector<float> b = padded_matrix(trans_b ? n : k, trans_b ? k : n, ldb, 12);
        const std::vector<float> c0 = random_gemm_values(static_cast<size_t>(m * ldc), 13);
        std::vector<float> blas = c0, fast = c0, want = c0;
        const uint64_t before = onednn_f32_products();
        gemm(trans_a, trans_b, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, blas.data(), ldc);
        EXPECT_EQ(onednn_f32_products(), before);
        set_fast_small_batches(true);
        gemm(trans_a, trans_b, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, fast.data(), ldc);
        set_fast_small_batches(false);
        EXPECT_EQ(onednn_f32_products(), before + 1);
        gemm_reference(trans_a, trans_b, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, want.data(), ldc);
        std::vector<float> sgemm_out = c0;
        sgemm(trans_a, trans_b, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 0.25f, sgemm_out.data(), ldc);
        EXPECT_EQ(blas, sgemm_out) << "switched off, gemm() is sgemm";
        for (size_t i = 0; i < want.size(); ++i) {
          if (static_cast<int64_t>(i) % ldc >= n) {
            ASSERT_EQ(fast[i], c0[i]) << "wrote past column n";
            continue;
          }
          ASSERT_NEAR(fast[i], want[i], 1e-4f) << trans_a << trans_b << " m=" << m << " at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gradmesh::kernels
