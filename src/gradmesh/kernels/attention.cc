#include "gradmesh/kernels/attention.h"

// Lane-wise arithmetic only, and no a * b + c contracted into an FMA by the
// compiler: the products fuse explicitly (kFma, the default numerics) or not
// at all (portable numerics), so every ISA copy below rounds exactly alike.
// See the header's note on determinism and kernels/isa.h.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/thread_pool.h"
#include "gradmesh/kernels/gemm.h"

// The build targets baseline x86-64, so the per-head loops (and the helpers
// inlined into them) are compiled once per ISA level (kernels/isa.h).
#include "gradmesh/kernels/isa.h"
#include "gradmesh/kernels/simd.h"

namespace gradmesh::kernels {
namespace {

// Queries and keys are taken in tiles of kBlock x kBlock: the tile and a
// head's packed q, k, v stay in L1/L2, and the diagonal tiles (the only ones
// that compute masked scores) are a small share of the work for T >= 64.
constexpr int64_t kBlock = 32;
constexpr int64_t kPanelRows = 4;  // output rows per register block of tile_product: each row of b serves four
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static_assert(kBlock % kPanelRows == 0);

int64_t padded_seq(int64_t seq) { return (seq + kBlock - 1) / kBlock * kBlock; }

float inverse_sqrt(int64_t head_dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

// exp(x) to ~2 ulp in plain arithmetic the compiler vectorises (std::exp is a
// libm call per element). Cody-Waite reduction x = n ln2 + r, Cephes' degree-6
// polynomial for exp(r), 2^n built in the exponent bits. exp(-inf) = 0 and
// x < -87 gives 0 (true values there are below 1.7e-38); NaN propagates.
template <bool kFma>
[[gnu::always_inline]] inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = madd<kFma>(xc, kLog2e, kRound) - kRound;
  const float r = madd<kFma>(-n, kLn2Lo, madd<kFma>(-n, kLn2Hi, xc));
  float p = 1.9875691500e-4f;
  p = madd<kFma>(p, r, 1.3981999507e-3f);
  p = madd<kFma>(p, r, 8.3334519073e-3f);
  p = madd<kFma>(p, r, 4.1665795894e-2f);
  p = madd<kFma>(p, r, 1.6666665459e-1f);
  p = madd<kFma>(p, r, 5.0000001201e-1f);
  p = madd<kFma>(p, r * r, r) + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_n;
}

using simd::load;
using simd::madd;
using simd::store;
using simd::Vec16;
using simd::Vec8;

// out[r, j] (+)= sum_k a(r, k) * b[k * ldb + j] for r < kBlock, j < cols,
// k < depth, with a(r, k) = a[r * a_row + k * a_k] (the strides read a
// transposed tile in place).
struct TileProduct {
  const float* a;
  int64_t a_row, a_k;
  const float* b;
  int64_t ldb;
  float* out;
  int64_t ldo, cols, depth;
};

// Terms known to be zero in a diagonal tile, whose masked probabilities are
// exactly 0: kUpToRow sums only k <= r (a = P or dS, k = key, r = query),
// kFromRow only k >= r (a = P^T or dS^T). Skipping an exact zero product
// changes no sum: sums start from +0 or a finite value, never from -0.
enum class Triangle { kFull, kUpToRow, kFromRow };

// The k range a block of rows [r0, r0 + rows) needs.
[[gnu::always_inline]] inline int64_t k_begin(Triangle tri, int64_t r0) { return tri == Triangle::kFromRow ? r0 : 0; }
[[gnu::always_inline]] inline int64_t k_end(Triangle tri, int64_t r0, int64_t rows, int64_t depth) {
  return tri == Triangle::kUpToRow ? std::min(depth, r0 + rows) : depth;
}

// One register block: rows [r0, r0 + kRows) x columns [j0, j0 + kWidth) (kWidth 32, 16 or 8).
template <bool kFma, int kRows, int kWidth, bool kAccumulate>
[[gnu::always_inline]] inline void product_panel(const TileProduct& t, Triangle tri, int64_t r0, int64_t j0) {
  using V = std::conditional_t<kWidth >= 16, Vec16, Vec8>;
  constexpr int kStep = sizeof(V) / sizeof(float), kVecs = kWidth / kStep;
  const float* a = t.a + r0 * t.a_row;
  float* out = t.out + r0 * t.ldo + j0;
  V acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) acc[r][v] = kAccumulate ? load<V>(out + r * t.ldo + v * kStep) : V{};
  for (int64_t k = k_begin(tri, r0), end = k_end(tri, r0, kRows, t.depth); k < end; ++k) {
    V bk[kVecs];
    for (int v = 0; v < kVecs; ++v) bk[v] = load<V>(t.b + k * t.ldb + j0 + v * kStep);
    // Fully unrolled: a fused madd is a loop over lanes, and without the
    // pragmas GCC leaves these loops rolled and the accumulators in memory.
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const float av = a[r * t.a_row + k * t.a_k];
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) acc[r][v] = madd<kFma>(av, bk[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int v = 0; v < kVecs; ++v) store(out + r * t.ldo + v * kStep, acc[r][v]);
}

// Columns [j0, j0 + kWidth * n) in n panels of kWidth; returns where they end.
template <bool kFma, int kWidth, bool kAccumulate>
[[gnu::always_inline]] inline int64_t product_panels(const TileProduct& t, Triangle tri, int64_t j0) {
  for (; j0 + kWidth <= t.cols; j0 += kWidth)
    for (int64_t r0 = 0; r0 < kBlock; r0 += kPanelRows) product_panel<kFma, kPanelRows, kWidth, kAccumulate>(t, tri, r0, j0);
  return j0;
}

// Every output is summed over k in order, starting from out (or 0): the
// sequence a scalar loop performs, which attention_decode relies on.
template <bool kFma, bool kAccumulate>
[[gnu::always_inline]] inline void tile_product(const TileProduct& t, Triangle tri = Triangle::kFull) {
  int64_t j0 = product_panels<kFma, 32, kAccumulate>(t, tri, 0);
  j0 = product_panels<kFma, 16, kAccumulate>(t, tri, j0);
  j0 = product_panels<kFma, 8, kAccumulate>(t, tri, j0);
  if (j0 == t.cols) return;
  for (int64_t r = 0; r < kBlock; ++r) {  // the last head_dim % 8 columns
    float* o = t.out + r * t.ldo;
    if (!kAccumulate) std::fill(o + j0, o + t.cols, 0.0f);
    for (int64_t k = k_begin(tri, r), end = k_end(tri, r, 1, t.depth); k < end; ++k) {
      const float av = t.a[r * t.a_row + k * t.a_k];
      for (int64_t j = j0; j < t.cols; ++j) o[j] = madd<kFma>(av, t.b[k * t.ldb + j], o[j]);
    }
  }
}

// Online softmax, one key block at a time. Each query row keeps its running
// max m and sum l; a block's scores s become p = exp(s - m_new), and
// alpha = exp(m - m_new) rescales what the row summed before (0 on the first
// block, where m = -inf). The block's sum of p runs over its keys in order.
// softmax_tile does this for the kBlock rows of a transposed tile at once
// (vectorised over rows), softmax_row for one row (decode); they perform the
// same operations per row, so the two paths agree bit for bit.

// st [kBlock keys, kBlock rows]: scores, masked ones -inf; overwritten with p.
// m, l, alpha [kBlock].
template <bool kFma>
[[gnu::always_inline]] inline void softmax_tile(float* __restrict st, float* __restrict m, float* __restrict l,
                                                float* __restrict alpha) {
  float m_new[kBlock], sum[kBlock];
  for (int64_t r = 0; r < kBlock; ++r) m_new[r] = m[r];
  for (int64_t j = 0; j < kBlock; ++j)
    for (int64_t r = 0; r < kBlock; ++r) m_new[r] = m_new[r] > st[j * kBlock + r] ? m_new[r] : st[j * kBlock + r];
  for (int64_t r = 0; r < kBlock; ++r) {
    alpha[r] = fast_exp<kFma>(m[r] - m_new[r]);
    sum[r] = 0.0f;
  }
  for (int64_t j = 0; j < kBlock; ++j)
    for (int64_t r = 0; r < kBlock; ++r) {
      st[j * kBlock + r] = fast_exp<kFma>(st[j * kBlock + r] - m_new[r]);
      sum[r] += st[j * kBlock + r];
    }
  for (int64_t r = 0; r < kBlock; ++r) {
    l[r] = l[r] * alpha[r] + sum[r];
    m[r] = m_new[r];
  }
}

// s [kBlock]: one row's scores, masked ones -inf; overwritten with p. Returns alpha.
template <bool kFma>
[[gnu::always_inline]] inline float softmax_row(float* __restrict s, float& m, float& l) {
  float m_new = m, sum = 0.0f;
  for (int64_t j = 0; j < kBlock; ++j) m_new = m_new > s[j] ? m_new : s[j];
  const float alpha = fast_exp<kFma>(m - m_new);
  for (int64_t j = 0; j < kBlock; ++j) {
    s[j] = fast_exp<kFma>(s[j] - m_new);
    sum += s[j];
  }
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

[[gnu::always_inline]] inline void scale_row(float* __restrict x, int64_t n, float alpha) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

// y [D] = acc / l; lse = m + log(l).
[[gnu::always_inline]] inline void finish_row(const float* acc, float m, float l, int64_t head_dim, float* y,
                                              float* lse) {
  for (int64_t d = 0; d < head_dim; ++d) y[d] = acc[d] / l;
  *lse = m + std::log(l);
}

// dst [Tp, D] = factor * rows [0, T) of one head's D columns in a [T, ld] matrix, zero padded.
[[gnu::always_inline]] inline void pack_rows(const float* src, int64_t ld, int64_t seq, int64_t head_dim,
                                             float factor, float* __restrict dst) {
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t d = 0; d < head_dim; ++d) dst[t * head_dim + d] = src[t * ld + d] * factor;
  std::fill(dst + seq * head_dim, dst + padded_seq(seq) * head_dim, 0.0f);
}

// dst[d * ldd + t] = factor * src[t * ld + d] for an 8 x 8 block: three rounds
// of two-source shuffles (unpack, shufps, 128-bit lane swap on AVX).
[[gnu::always_inline]] inline void transpose8(const float* src, int64_t ld, float factor, float* dst, int64_t ldd) {
  using Index = int32_t __attribute__((vector_size(32)));
  Vec8 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = load<Vec8>(src + i * ld) * factor;
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shuffle(r[i], r[i + 1], Index{0, 8, 1, 9, 4, 12, 5, 13});
    t[i + 1] = __builtin_shuffle(r[i], r[i + 1], Index{2, 10, 3, 11, 6, 14, 7, 15});
  }
  for (int i = 0; i < 8; i += 4)
    for (int half = 0; half < 2; ++half) {  // r[i + 2 half + c]: columns c and c + 4 of rows i..i+3, c = 0..1 / 2..3
      r[i + 2 * half] = __builtin_shuffle(t[i + half], t[i + 2 + half], Index{0, 1, 8, 9, 4, 5, 12, 13});
      r[i + 2 * half + 1] = __builtin_shuffle(t[i + half], t[i + 2 + half], Index{2, 3, 10, 11, 6, 7, 14, 15});
    }
  for (int c = 0; c < 4; ++c) {
    store(dst + c * ldd, __builtin_shuffle(r[c], r[c + 4], Index{0, 1, 2, 3, 8, 9, 10, 11}));
    store(dst + (c + 4) * ldd, __builtin_shuffle(r[c], r[c + 4], Index{4, 5, 6, 7, 12, 13, 14, 15}));
  }
}

// dst [D, Tp] = factor * the transpose of one head's D columns, zero padded.
[[gnu::always_inline]] inline void pack_transposed(const float* src, int64_t ld, int64_t seq, int64_t head_dim,
                                                   float factor, float* __restrict dst) {
  const int64_t tp = padded_seq(seq), t8 = seq / 8 * 8, d8 = head_dim / 8 * 8;
  for (int64_t t = 0; t < t8; t += 8)
    for (int64_t d = 0; d < d8; d += 8) transpose8(src + t * ld + d, ld, factor, dst + d * tp + t, tp);
  for (int64_t d = 0; d < head_dim; ++d) {
    float* out = dst + d * tp;
    for (int64_t t = d < d8 ? t8 : 0; t < seq; ++t) out[t] = src[t * ld + d] * factor;
    std::fill(out + seq, out + tp, 0.0f);
  }
}

// In a diagonal tile (queries and keys both from position i0) the scores of
// keys after their query, or past the sequence's end, become -inf. Every row
// keeps key i0, so no row's maximum is -inf. Query-major: s[r * kBlock + j].
void mask_diagonal_tile(int64_t i0, int64_t seq, float* s) {
  for (int64_t r = 0; r < kBlock; ++r)
    for (int64_t j = std::min(r + 1, seq - i0); j < kBlock; ++j) s[r * kBlock + j] = kNegInf;
}

// The same mask for a key-major tile st[j * kBlock + r].
void mask_diagonal_tile_transposed(int64_t i0, int64_t seq, float* st) {
  for (int64_t j = 0; j < kBlock; ++j)
    for (int64_t r = 0; r < kBlock; ++r)
      if (j > r || j >= seq - i0) st[j * kBlock + r] = kNegInf;
}

// Under train.precision = "bf16" every product's operands (q, k, v, dy and
// the probability and score-gradient tiles) are rounded to bf16 values kept
// in float32: each product of two is then exact and the sums stay float32,
// the arithmetic of a bf16 matmul with float32 accumulation (autocast's for
// attention's two matmuls). The softmax and its sums stay float32.
[[gnu::always_inline]] inline float bf16_value(float x) { return bf16_to_float(float_to_bf16(x)); }
[[gnu::always_inline]] inline void round_to_bf16_values(bool bf16, float* x, int64_t n) {
  if (!bf16) return;
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_value(x[i]);
}

struct ForwardBuffers {
  ForwardBuffers(const AttentionShape& s, bool bf16_products)
      : bf16(bf16_products),
        qt(static_cast<size_t>(padded_seq(s.seq) * s.head_dim)),
        k(qt.size()),
        v(qt.size()),
        acc(static_cast<size_t>(kBlock * s.head_dim)),
        scores(static_cast<size_t>(kBlock * kBlock)) {}
  bool bf16;                  // products of bf16 values (above)
  std::vector<float> qt;      // [D, Tp] this head's queries times 1/sqrt(D), transposed
  std::vector<float> k, v;    // [Tp, D] its keys and values
  std::vector<float> acc;     // [kBlock, D] unnormalised outputs of a query block
  std::vector<float> scores;  // [kBlock keys, kBlock queries] one tile's scores, then probabilities
};

// Scores are computed key-major (S^T = K Q^T) so that the softmax bookkeeping
// of all kBlock query rows runs vectorised across rows.
template <bool kFma>
[[gnu::always_inline]] inline void forward_head(const float* qkv, const AttentionShape& s, int64_t b, int64_t h,
                                                ForwardBuffers& buf, float* y, float* lse) {
  const int64_t T = s.seq, D = s.head_dim, C = s.heads * D, ld = 3 * C, tp = padded_seq(T);
  const float* base = qkv + b * T * ld + h * D;
  float* acc = buf.acc.data();
  float* pt = buf.scores.data();
  pack_transposed(base, ld, T, D, inverse_sqrt(D), buf.qt.data());
  pack_rows(base + C, ld, T, D, 1.0f, buf.k.data());
  pack_rows(base + 2 * C, ld, T, D, 1.0f, buf.v.data());
  for (std::vector<float>* packed : {&buf.qt, &buf.k, &buf.v})
    round_to_bf16_values(buf.bf16, packed->data(), static_cast<int64_t>(packed->size()));
  float m[kBlock], l[kBlock], alpha[kBlock];
  for (int64_t i0 = 0; i0 < T; i0 += kBlock) {
    std::fill(m, m + kBlock, kNegInf);
    std::fill(l, l + kBlock, 0.0f);
    std::fill(acc, acc + kBlock * D, 0.0f);
    for (int64_t j0 = 0; j0 <= i0; j0 += kBlock) {  // key blocks past the diagonal are fully masked
      tile_product<kFma, false>({buf.k.data() + j0 * D, D, 1, buf.qt.data() + i0, tp, pt, kBlock, kBlock, D});
      const Triangle diagonal = j0 == i0 ? Triangle::kUpToRow : Triangle::kFull;
      if (j0 == i0) mask_diagonal_tile_transposed(i0, T, pt);
      softmax_tile<kFma>(pt, m, l, alpha);
      round_to_bf16_values(buf.bf16, pt, kBlock * kBlock);
      for (int64_t r = 0; r < kBlock; ++r) scale_row(acc + r * D, D, alpha[r]);
      // Masked probabilities are exactly 0: keys after a query add nothing to it.
      tile_product<kFma, true>({pt, 1, kBlock, buf.v.data() + j0 * D, D, acc, D, D, kBlock}, diagonal);
    }
    float* y_block = y + (b * T + i0) * C + h * D;
    float* lse_block = lse + (b * s.heads + h) * T + i0;
    for (int64_t r = 0; r < std::min(kBlock, T - i0); ++r)
      finish_row(acc + r * D, m[r], l[r], D, y_block + r * C, lse_block + r);
  }
}

[[gnu::always_inline]] inline void forward_heads_body(const float* qkv, const AttentionShape& s, float* y, float* lse,
                                                     int64_t lo, int64_t hi, bool fma, bool bf16) {
  ForwardBuffers buf(s, bf16);
  for (int64_t bh = lo; bh < hi; ++bh) {
    if (fma) forward_head<true>(qkv, s, bh / s.heads, bh % s.heads, buf, y, lse);
    else forward_head<false>(qkv, s, bh / s.heads, bh % s.heads, buf, y, lse);
  }
}
GRADMESH_ISA_VARIANTS(forward_heads,
                      (const float* qkv, const AttentionShape& s, float* y, float* lse, int64_t lo, int64_t hi,
                       bool fma, bool bf16),
                      (qkv, s, y, lse, lo, hi, fma, bf16))

struct BackwardBuffers {
  BackwardBuffers(const AttentionShape& s, bool bf16_products) : bf16(bf16_products) {
    const auto head = static_cast<size_t>(padded_seq(s.seq) * s.head_dim);
    for (std::vector<float>* v : {&q, &k, &dy, &kt, &vt, &dq, &dk, &dv}) v->resize(head);
    p.resize(static_cast<size_t>(kBlock * kBlock));
    ds.resize(p.size());
    delta.resize(static_cast<size_t>(s.seq));
  }
  bool bf16;                      // products of bf16 values (above ForwardBuffers)
  std::vector<float> q, k, dy;    // [Tp, D] queries times 1/sqrt(D), keys, output gradient
  std::vector<float> kt, vt;      // [D, Tp] keys and values, transposed
  std::vector<float> dq, dk, dv;  // [Tp, D] gradients (dq with respect to the scaled queries)
  std::vector<float> p, ds;       // [kBlock, kBlock] one tile's probabilities and score gradients
  std::vector<float> delta;       // [T] rowsum(dy * y)
};

// sum_d a[d] * b[d] in eight fixed lanes, then the lanes in order: vectorised, and the same on every ISA.
[[gnu::always_inline]] inline float row_dot(const float* a, const float* b, int64_t n) {
  Vec8 lanes = {};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) lanes += load<Vec8>(a + d) * load<Vec8>(b + d);
  float sum = 0.0f;
  for (int l = 0; l < 8; ++l) sum += lanes[l];
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// Query block [i0, i0 + kBlock) against key block [j0, j0 + kBlock): recomputes
// P = exp(S - lse) and dS = P * (dy.v - delta), then adds the tile's share of
// dV = P^T dy, dK = dS^T q and dQ = dS k.
template <bool kFma>
[[gnu::always_inline]] inline void backward_tile(int64_t seq, int64_t head_dim, int64_t i0, int64_t j0,
                                                 const float* row_lse, BackwardBuffers& buf) {
  const int64_t D = head_dim, tp = padded_seq(seq), rows = std::min(kBlock, seq - i0);
  float* p = buf.p.data();
  float* ds = buf.ds.data();
  const float* q = buf.q.data() + i0 * D;
  const float* dy = buf.dy.data() + i0 * D;
  tile_product<kFma, false>({q, D, 1, buf.kt.data() + j0, tp, p, kBlock, kBlock, D});  // the forward's scores, bit for bit
  if (j0 == i0) mask_diagonal_tile(i0, seq, p);
  tile_product<kFma, false>({dy, D, 1, buf.vt.data() + j0, tp, ds, kBlock, kBlock, D});  // dP = dy . v
  for (int64_t r = 0; r < rows; ++r) {
    const float row_l = row_lse[i0 + r], delta = buf.delta[static_cast<size_t>(i0 + r)];
    float* __restrict pr = p + r * kBlock;
    float* __restrict dsr = ds + r * kBlock;
    for (int64_t j = 0; j < kBlock; ++j) {
      pr[j] = fast_exp<kFma>(pr[j] - row_l);
      dsr[j] = pr[j] * (dsr[j] - delta);
    }
  }
  std::fill(p + rows * kBlock, p + kBlock * kBlock, 0.0f);  // rows past the sequence's end
  std::fill(ds + rows * kBlock, ds + kBlock * kBlock, 0.0f);
  round_to_bf16_values(buf.bf16, p, kBlock * kBlock);
  round_to_bf16_values(buf.bf16, ds, kBlock * kBlock);
  const Triangle keys_from_row = j0 == i0 ? Triangle::kFromRow : Triangle::kFull;
  const Triangle keys_up_to_row = j0 == i0 ? Triangle::kUpToRow : Triangle::kFull;
  tile_product<kFma, true>({p, 1, kBlock, dy, D, buf.dv.data() + j0 * D, D, D, rows}, keys_from_row);
  tile_product<kFma, true>({ds, 1, kBlock, q, D, buf.dk.data() + j0 * D, D, D, rows}, keys_from_row);
  tile_product<kFma, true>({ds, kBlock, 1, buf.k.data() + j0 * D, D, buf.dq.data() + i0 * D, D, D, kBlock}, keys_up_to_row);
}

// Rows [0, T) of one head's D columns (row stride ld) = or += factor * src [T, D].
void store_rows(const float* src, int64_t seq, int64_t head_dim, float factor, int64_t ld, bool accumulate,
                float* dst) {
  for (int64_t t = 0; t < seq; ++t) {
    const float* __restrict in = src + t * head_dim;
    float* __restrict out = dst + t * ld;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = accumulate ? out[d] + in[d] * factor : in[d] * factor;
  }
}

template <bool kFma>
[[gnu::always_inline]] inline void backward_head(const float* qkv, const float* y, const float* lse, const float* dy,
                                                 const AttentionShape& s, int64_t b, int64_t h, BackwardBuffers& buf,
                                                 float* dqkv, bool accumulate) {
  const int64_t T = s.seq, D = s.head_dim, C = s.heads * D, ld = 3 * C;
  const float scale = inverse_sqrt(D);
  const float* base = qkv + b * T * ld + h * D;
  pack_rows(base, ld, T, D, scale, buf.q.data());
  pack_rows(base + C, ld, T, D, 1.0f, buf.k.data());
  pack_transposed(base + C, ld, T, D, 1.0f, buf.kt.data());
  pack_transposed(base + 2 * C, ld, T, D, 1.0f, buf.vt.data());
  pack_rows(dy + b * T * C + h * D, C, T, D, 1.0f, buf.dy.data());
  for (std::vector<float>* packed : {&buf.q, &buf.k, &buf.kt, &buf.vt, &buf.dy})
    round_to_bf16_values(buf.bf16, packed->data(), static_cast<int64_t>(packed->size()));
  for (std::vector<float>* g : {&buf.dq, &buf.dk, &buf.dv}) std::fill(g->begin(), g->end(), 0.0f);
  // delta_i = rowsum(dy_i * y_i) = sum_j P_ij dP_ij, the term the softmax backward subtracts.
  for (int64_t t = 0; t < T; ++t) {
    const float* yr = y + (b * T + t) * C + h * D;
    const float* dyr = buf.dy.data() + t * D;
    buf.delta[static_cast<size_t>(t)] = row_dot(dyr, yr, D);
  }
  const float* row_lse = lse + (b * s.heads + h) * T;
  for (int64_t j0 = 0; j0 < T; j0 += kBlock)
    for (int64_t i0 = j0; i0 < T; i0 += kBlock)  // query blocks before the key block see none of it
      backward_tile<kFma>(T, D, i0, j0, row_lse, buf);
  float* out = dqkv + b * T * ld + h * D;
  store_rows(buf.dq.data(), T, D, scale, ld, accumulate, out);  // q = scaled q * sqrt(D): chain rule
  store_rows(buf.dk.data(), T, D, 1.0f, ld, accumulate, out + C);
  store_rows(buf.dv.data(), T, D, 1.0f, ld, accumulate, out + 2 * C);
}

[[gnu::always_inline]] inline void backward_heads_body(const float* qkv, const float* y, const float* lse,
                                                      const float* dy, const AttentionShape& s, float* dqkv,
                                                      bool accumulate, int64_t lo, int64_t hi, bool fma,
                                                      bool bf16) {
  BackwardBuffers buf(s, bf16);
  for (int64_t bh = lo; bh < hi; ++bh) {
    if (fma) backward_head<true>(qkv, y, lse, dy, s, bh / s.heads, bh % s.heads, buf, dqkv, accumulate);
    else backward_head<false>(qkv, y, lse, dy, s, bh / s.heads, bh % s.heads, buf, dqkv, accumulate);
  }
}
GRADMESH_ISA_VARIANTS(backward_heads,
                      (const float* qkv, const float* y, const float* lse, const float* dy, const AttentionShape& s,
                       float* dqkv, bool accumulate, int64_t lo, int64_t hi, bool fma, bool bf16),
                      (qkv, y, lse, dy, s, dqkv, accumulate, lo, hi, fma, bf16))

// The forward's arithmetic for its last row, key block by key block: each
// score and output element sums in the same order as tile_product, so the
// result is bit-identical to the forward's.
template <bool kFma>
[[gnu::always_inline]] inline void decode_numerics(const float* q, const float* k_cache, const float* v_cache,
                                                   int64_t length, int64_t heads, int64_t head_dim, float* y,
                                                   bool bf16) {
  const int64_t D = head_dim, C = heads * D;
  const float scale = inverse_sqrt(D);
  std::vector<float> q_scaled(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
  float s[kBlock];
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t d = 0; d < D; ++d) q_scaled[static_cast<size_t>(d)] = q[h * D + d] * scale;
    round_to_bf16_values(bf16, q_scaled.data(), D);
    float m = kNegInf, l = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t j0 = 0; j0 < length; j0 += kBlock) {
      const int64_t valid = std::min(kBlock, length - j0);
      std::fill(s, s + kBlock, kNegInf);  // keys past the cache's end, as the forward masks them
      for (int64_t j = 0; j < valid; ++j) {
        const float* k = k_cache + (j0 + j) * C + h * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d)
          dot = madd<kFma>(q_scaled[static_cast<size_t>(d)], bf16 ? bf16_value(k[d]) : k[d], dot);
        s[j] = dot;
      }
      scale_row(acc.data(), D, softmax_row<kFma>(s, m, l));
      round_to_bf16_values(bf16, s, valid);
      for (int64_t j = 0; j < valid; ++j) {
        const float* v = v_cache + (j0 + j) * C + h * D;
        for (int64_t d = 0; d < D; ++d)
          acc[static_cast<size_t>(d)] = madd<kFma>(s[j], bf16 ? bf16_value(v[d]) : v[d], acc[static_cast<size_t>(d)]);
      }
    }
    float lse;
    finish_row(acc.data(), m, l, D, y + h * D, &lse);
  }
}

[[gnu::always_inline]] inline void decode_heads_body(const float* q, const float* k_cache, const float* v_cache,
                                                    int64_t length, int64_t heads, int64_t head_dim, float* y,
                                                    bool fma, bool bf16) {
  if (fma) decode_numerics<true>(q, k_cache, v_cache, length, heads, head_dim, y, bf16);
  else decode_numerics<false>(q, k_cache, v_cache, length, heads, head_dim, y, bf16);
}
GRADMESH_ISA_VARIANTS(decode_heads,
                      (const float* q, const float* k_cache, const float* v_cache, int64_t length, int64_t heads,
                       int64_t head_dim, float* y, bool fma, bool bf16),
                      (q, k_cache, v_cache, length, heads, head_dim, y, fma, bf16))

bool bf16_products() { return matmul_precision() == MatmulPrecision::kBf16; }

}  // namespace

void causal_attention_forward(const float* qkv, const AttentionShape& s, float* y, float* lse) {
  if (s.batch * s.seq * s.heads * s.head_dim == 0) return;
  compute_pool().parallel_for(0, s.batch * s.heads, 1,
                              [&, fma = !portable_numerics(), bf16 = bf16_products()](int, int64_t lo, int64_t hi) {
                                forward_heads(qkv, s, y, lse, lo, hi, fma, bf16);
                              });
}

void causal_attention_backward(const float* qkv, const float* y, const float* lse, const float* dy,
                               const AttentionShape& s, float* dqkv, bool accumulate) {
  if (s.batch * s.seq * s.heads * s.head_dim == 0) return;
  compute_pool().parallel_for(0, s.batch * s.heads, 1, [&, fma = !portable_numerics(), bf16 = bf16_products()](int, int64_t lo, int64_t hi) {
    backward_heads(qkv, y, lse, dy, s, dqkv, accumulate, lo, hi, fma, bf16);
  });
}

void attention_decode(const float* q, const float* k_cache, const float* v_cache, int64_t length, int64_t heads,
                      int64_t head_dim, float* y) {
  if (length <= 0 || heads * head_dim == 0) return;
  decode_heads(q, k_cache, v_cache, length, heads, head_dim, y, !portable_numerics(), bf16_products());
}

void causal_attention_reference(const float* qkv, const AttentionShape& s, float* y, float* lse) {
  const int64_t T = s.seq, D = s.head_dim, C = s.heads * D, ld = 3 * C;
  std::vector<double> scores(static_cast<size_t>(T));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* q = qkv + (b * T + i) * ld + h * D;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {  // keys after the query are masked out
          const float* k = qkv + (b * T + j) * ld + C + h * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
          scores[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          max = std::max(max, scores[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(scores[static_cast<size_t>(j)] - max);
        for (int64_t d = 0; d < D; ++d) {
          double out = 0;
          for (int64_t j = 0; j <= i; ++j)
            out += std::exp(scores[static_cast<size_t>(j)] - max) / sum * qkv[(b * T + j) * ld + 2 * C + h * D + d];
          y[(b * T + i) * C + h * D + d] = static_cast<float>(out);
        }
        if (lse) lse[(b * s.heads + h) * T + i] = static_cast<float>(max + std::log(sum));
      }
}

}  // namespace gradmesh::kernels
