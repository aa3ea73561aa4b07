// Fused causal attention against the plain reference (explicit scores, mask
// and softmax in double), finite differences, and the decode path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gradmesh/core/rng.h"
#include "gradmesh/kernels/attention.h"
#include "gradmesh/kernels/gemm.h"
#include "kernels/nan.h"

namespace gradmesh::kernels {
namespace {

using testing::kNaN;

int64_t width(const AttentionShape& s) { return s.heads * s.head_dim; }
size_t qkv_size(const AttentionShape& s) { return static_cast<size_t>(s.batch * s.seq * 3 * width(s)); }
size_t y_size(const AttentionShape& s) { return static_cast<size_t>(s.batch * s.seq * width(s)); }
size_t lse_size(const AttentionShape& s) { return static_cast<size_t>(s.batch * s.heads * s.seq); }

std::vector<float> uniform(size_t n, uint64_t seed, float lo, float hi) {
  const CounterRng rng(4321, RngPurpose::kTest, seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i);
  return v;
}

std::string describe_shape(const AttentionShape& s) {
  return "B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seq) + " heads=" + std::to_string(s.heads) +
         " D=" + std::to_string(s.head_dim);
}

// Shapes covering T = 1, T below, at and past one 32-row tile and not a
// multiple of it, one and several heads, head_dim 8/16/32/64 and one (12)
// that is not a multiple of the 8-float vectors.
const std::vector<AttentionShape> kShapes = {
    {1, 1, 1, 8}, {2, 5, 1, 8}, {1, 32, 4, 16}, {2, 33, 4, 16}, {1, 70, 2, 32},
    {2, 97, 4, 32}, {1, 45, 1, 64}, {1, 40, 3, 12}, {3, 64, 1, 32},
};

TEST(CausalAttention, ForwardMatchesReference) {
  for (const AttentionShape& s : kShapes) {
    SCOPED_TRACE(describe_shape(s));
    // Scores q.k / sqrt(D) with q, k ~ U(-3, 3) have a spread of ~3: the softmax is far from uniform.
    const std::vector<float> qkv = uniform(qkv_size(s), 1, -3.0f, 3.0f);
    std::vector<float> y(y_size(s), kNaN), lse(lse_size(s), kNaN);
    std::vector<float> y_ref(y.size()), lse_ref(lse.size());
    causal_attention_forward(qkv.data(), s, y.data(), lse.data());
    causal_attention_reference(qkv.data(), s, y_ref.data(), lse_ref.data());
    // float32 throughout: |y| <= 3 and lse <= ~15 carry rounding of a few 1e-7 relative.
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-5) << "y element " << i;
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse_ref[i], 2e-5) << "lse element " << i;
  }
}

TEST(CausalAttention, FirstRowCopiesItsValueAndLaterKeysDoNotLeakBack) {
  const AttentionShape s{1, 40, 2, 8};
  std::vector<float> qkv = uniform(qkv_size(s), 2, -1.0f, 1.0f);
  std::vector<float> y(y_size(s)), lse(lse_size(s)), y2(y.size());
  causal_attention_forward(qkv.data(), s, y.data(), lse.data());
  const int64_t C = width(s);
  for (int64_t c = 0; c < C; ++c) EXPECT_EQ(y[static_cast<size_t>(c)], qkv[static_cast<size_t>(2 * C + c)]);
  // Changing keys and values of positions >= 20 leaves rows < 20 bit for bit unchanged.
  for (int64_t t = 20; t < s.seq; ++t)
    for (int64_t c = C; c < 3 * C; ++c) qkv[static_cast<size_t>(t * 3 * C + c)] += 5.0f;
  causal_attention_forward(qkv.data(), s, y2.data(), lse.data());
  EXPECT_EQ(std::memcmp(y.data(), y2.data(), sizeof(float) * 20 * C), 0);
  EXPECT_NE(std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)), 0);
}

// L = sum(y * w) evaluated in double from the float kernel's y.
double weighted_loss(const std::vector<float>& qkv, const AttentionShape& s, const std::vector<float>& w) {
  std::vector<float> y(y_size(s)), lse(lse_size(s));
  causal_attention_forward(qkv.data(), s, y.data(), lse.data());
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) sum += static_cast<double>(y[i]) * w[i];
  return sum;
}

// Tolerance. A step h = 1e-2 on inputs of magnitude <= 1.5. Elements not
// depending on the perturbed input are recomputed bit for bit, so only the
// rows that do (one row for a query element, up to T rows of one head for a
// key or value element) carry float rounding: ~sqrt(T * D) * 3e-7 in L, or
// ~1e-3 after dividing by 2h at T * D = 2000. The central difference's
// truncation error is h^2 / 6 * |L'''| ~ 1e-4 for O(1) third derivatives.
// |analytic - numeric| <= 3e-3 + 1e-2 * |numeric| leaves a margin of 3x over
// both, while a missing term or a wrong scale is off by O(0.1) or more.
void expect_backward_matches_finite_differences(const AttentionShape& s, uint64_t seed) {
  SCOPED_TRACE(describe_shape(s));
  std::vector<float> qkv = uniform(qkv_size(s), seed, -1.5f, 1.5f);
  const std::vector<float> w = uniform(y_size(s), seed + 1, -1.0f, 1.0f);
  std::vector<float> y(y_size(s)), lse(lse_size(s)), dqkv(qkv.size(), kNaN);
  causal_attention_forward(qkv.data(), s, y.data(), lse.data());
  causal_attention_backward(qkv.data(), y.data(), lse.data(), w.data(), s, dqkv.data(), /*accumulate=*/false);
  const double h = 1e-2;
  int failed = 0;
  double largest = 0;
  for (size_t i = 0; i < qkv.size(); ++i) {
    const float saved = qkv[i];
    const float plus = static_cast<float>(saved + h), minus = static_cast<float>(saved - h);
    qkv[i] = plus;
    const double up = weighted_loss(qkv, s, w);
    qkv[i] = minus;
    const double down = weighted_loss(qkv, s, w);
    qkv[i] = saved;
    const double numeric = (up - down) / (static_cast<double>(plus) - minus);
    largest = std::max(largest, std::fabs(numeric));
    if (!(std::fabs(dqkv[i] - numeric) <= 3e-3 + 1e-2 * std::fabs(numeric)) && ++failed <= 8)
      ADD_FAILURE() << "dqkv element " << i << ": analytic " << dqkv[i] << ", numeric " << numeric;
  }
  EXPECT_EQ(failed, 0) << "of " << qkv.size();
  EXPECT_GT(largest, 0.1);  // the check saw real gradients
}

TEST(CausalAttention, BackwardMatchesFiniteDifferencesOneRow) {
  expect_backward_matches_finite_differences({2, 1, 2, 8}, 10);
}

TEST(CausalAttention, BackwardMatchesFiniteDifferencesPartialTile) {
  expect_backward_matches_finite_differences({2, 29, 2, 8}, 20);
}

TEST(CausalAttention, BackwardMatchesFiniteDifferencesSeveralTiles) {
  // Three query and key blocks (the last partial): off-diagonal and diagonal tiles.
  expect_backward_matches_finite_differences({1, 67, 2, 16}, 30);
}

TEST(CausalAttention, BackwardMatchesFiniteDifferencesWidePanels) {
  expect_backward_matches_finite_differences({1, 40, 1, 32}, 40);
  expect_backward_matches_finite_differences({1, 21, 1, 12}, 50);
}

TEST(CausalAttention, BackwardAccumulateAddsAndOverwriteWritesEveryElement) {
  const AttentionShape s{2, 37, 3, 16};
  const std::vector<float> qkv = uniform(qkv_size(s), 60, -2.0f, 2.0f);
  const std::vector<float> dy = uniform(y_size(s), 61, -1.0f, 1.0f);
  std::vector<float> y(y_size(s)), lse(lse_size(s));
  causal_attention_forward(qkv.data(), s, y.data(), lse.data());
  std::vector<float> fresh(qkv.size(), kNaN);  // every element must be written
  causal_attention_backward(qkv.data(), y.data(), lse.data(), dy.data(), s, fresh.data(), false);
  for (size_t i = 0; i < fresh.size(); ++i) ASSERT_TRUE(std::isfinite(fresh[i])) << i;
  const std::vector<float> before = uniform(qkv.size(), 62, -1.0f, 1.0f);
  std::vector<float> added = before;
  causal_attention_backward(qkv.data(), y.data(), lse.data(), dy.data(), s, added.data(), true);
  for (size_t i = 0; i < added.size(); ++i) ASSERT_EQ(added[i], before[i] + fresh[i]) << i;
}

TEST(CausalAttention, DecodeEqualsLastForwardRowForEveryLength) {
  for (const AttentionShape& s : {AttentionShape{1, 75, 3, 32}, AttentionShape{1, 40, 2, 12}}) {
    SCOPED_TRACE(describe_shape(s));
    const int64_t T = s.seq, C = width(s);
    const std::vector<float> qkv = uniform(qkv_size(s), 70, -3.0f, 3.0f);
    std::vector<float> y(y_size(s)), lse(lse_size(s));
    causal_attention_forward(qkv.data(), s, y.data(), lse.data());
    // The cache as generation builds it: rows of k and v, each [C], one per position.
    std::vector<float> k_cache(static_cast<size_t>(T * C)), v_cache(k_cache.size()), out(static_cast<size_t>(C));
    for (int64_t t = 0; t < T; ++t) {
      std::memcpy(&k_cache[static_cast<size_t>(t * C)], &qkv[static_cast<size_t>(t * 3 * C + C)], sizeof(float) * C);
      std::memcpy(&v_cache[static_cast<size_t>(t * C)], &qkv[static_cast<size_t>(t * 3 * C + 2 * C)],
                  sizeof(float) * C);
    }
    for (int64_t length = 1; length <= T; ++length) {
      const float* q = &qkv[static_cast<size_t>((length - 1) * 3 * C)];
      std::fill(out.begin(), out.end(), kNaN);
      attention_decode(q, k_cache.data(), v_cache.data(), length, s.heads, s.head_dim, out.data());
      ASSERT_EQ(std::memcmp(out.data(), &y[static_cast<size_t>((length - 1) * C)], sizeof(float) * C), 0)
          << "length " << length << ": decode " << out[0] << ", forward " << y[static_cast<size_t>((length - 1) * C)];
    }
  }
}

TEST(CausalAttention, BitIdenticalForAnyThreadCount) {
  const AttentionShape s{3, 50, 2, 16};  // six (batch, head) pairs: split unevenly across 4 threads
  const std::vector<float> qkv = uniform(qkv_size(s), 80, -2.0f, 2.0f);
  const std::vector<float> dy = uniform(y_size(s), 81, -1.0f, 1.0f);
  struct Result {
    std::vector<float> y, lse, dqkv;
  };
  auto run = [&](int threads) {
    set_num_threads(threads);
    Result r{std::vector<float>(y_size(s)), std::vector<float>(lse_size(s)), std::vector<float>(qkv.size())};
    causal_attention_forward(qkv.data(), s, r.y.data(), r.lse.data());
    causal_attention_backward(qkv.data(), r.y.data(), r.lse.data(), dy.data(), s, r.dqkv.data(), false);
    return r;
  };
  const int before = num_threads();
  const Result one = run(1);
  for (int threads : {2, 4}) {
    SCOPED_TRACE(threads);
    const Result many = run(threads);
    EXPECT_EQ(std::memcmp(one.y.data(), many.y.data(), one.y.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(one.lse.data(), many.lse.data(), one.lse.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(one.dqkv.data(), many.dqkv.data(), one.dqkv.size() * sizeof(float)), 0);
  }
  set_num_threads(before);
}

// train.precision = "bf16": the products take bf16 values (8 significant
// bits), summed in float32. Against the float64 reference the output keeps
// about two decimal digits; the gradients stay near float32's; decoding
// still reproduces the forward's last row bit for bit.
TEST(CausalAttention, Bf16ProductsStayNearTheReferenceAndDecodeStillMatches) {
  const AttentionShape s{2, 45, 2, 20};
  const int64_t C = width(s);
  const std::vector<float> qkv = uniform(qkv_size(s), 90, -3.0f, 3.0f), dy = uniform(y_size(s), 91, -1.0f, 1.0f);
  struct Result {
    std::vector<float> y, lse, dqkv;
  };
  auto run = [&] {
    Result r{std::vector<float>(y_size(s)), std::vector<float>(lse_size(s)), std::vector<float>(qkv.size())};
    causal_attention_forward(qkv.data(), s, r.y.data(), r.lse.data());
    causal_attention_backward(qkv.data(), r.y.data(), r.lse.data(), dy.data(), s, r.dqkv.data(), false);
    return r;
  };
  const Result f32 = run();
  set_matmul_precision(MatmulPrecision::kBf16);
  const Result bf16 = run();
  std::vector<float> out(static_cast<size_t>(C));
  std::vector<float> k_cache(static_cast<size_t>(s.seq * C)), v_cache(k_cache.size());
  for (int64_t t = 0; t < s.seq; ++t) {
    std::memcpy(&k_cache[static_cast<size_t>(t * C)], &qkv[static_cast<size_t>(t * 3 * C + C)], sizeof(float) * C);
    std::memcpy(&v_cache[static_cast<size_t>(t * C)], &qkv[static_cast<size_t>(t * 3 * C + 2 * C)], sizeof(float) * C);
  }
  attention_decode(&qkv[static_cast<size_t>((s.seq - 1) * 3 * C)], k_cache.data(), v_cache.data(), s.seq, s.heads,
                   s.head_dim, out.data());
  set_matmul_precision(MatmulPrecision::kFp32);
  EXPECT_EQ(std::memcmp(out.data(), &bf16.y[static_cast<size_t>((s.seq - 1) * C)], sizeof(float) * C), 0);

  std::vector<float> y_ref(y_size(s)), lse_ref(lse_size(s));
  causal_attention_reference(qkv.data(), s, y_ref.data(), lse_ref.data());
  double y_err = 0, f32_err = 0, grad_err = 0, grad_max = 0;
  for (size_t i = 0; i < y_ref.size(); ++i) {
    y_err = std::max(y_err, static_cast<double>(std::fabs(bf16.y[i] - y_ref[i])));
    f32_err = std::max(f32_err, static_cast<double>(std::fabs(f32.y[i] - y_ref[i])));
  }
  for (size_t i = 0; i < f32.dqkv.size(); ++i) {
    grad_err = std::max(grad_err, static_cast<double>(std::fabs(bf16.dqkv[i] - f32.dqkv[i])));
    grad_max = std::max(grad_max, static_cast<double>(std::fabs(f32.dqkv[i])));
  }
  // |y| <= 3 and each operand carries up to 2^-9 relative error: a few 1e-2 at most.
  EXPECT_LE(y_err, 5e-2);
  EXPECT_GT(y_err, 10 * f32_err) << "the products did not round to bf16";
  EXPECT_LE(grad_err, 5e-2 * grad_max);
  EXPECT_GT(grad_err, 0.0);
}

TEST(CausalAttention, EmptyShapesTouchNothing) {
  std::vector<float> buffer(8, 7.0f);
  for (const AttentionShape& s : {AttentionShape{0, 4, 1, 8}, AttentionShape{2, 0, 1, 8}}) {
    causal_attention_forward(buffer.data(), s, buffer.data(), buffer.data());
    causal_attention_backward(buffer.data(), buffer.data(), buffer.data(), buffer.data(), s, buffer.data(), false);
  }
  attention_decode(buffer.data(), buffer.data(), buffer.data(), 0, 1, 8, buffer.data());
  for (float v : buffer) EXPECT_EQ(v, 7.0f);
}

}  // namespace
}  // namespace gradmesh::kernels
