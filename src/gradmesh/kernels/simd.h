// Explicit SIMD for the own kernels, in GCC vector extensions: each ISA copy
// (isa.h) lowers a Vec16 to its own registers (one zmm, two ymm or four xmm)
// and every lane performs the same operations in the same order, so results
// do not depend on the width. Internal to kernels/*.cc.
#pragma once

#include <cstring>


// Rule for the kernels: every function that takes or returns a vector in
// code reached from an ISA copy is always inlined (these helpers, functors'
// operators, lambdas marked __attribute__((always_inline))). A function left
// out of line is compiled for the baseline, and a 64-byte vector crossing
// from an AVX-512 copy to it changes calling convention: wrong lanes, no
// error. GCC's note on that (-Wpsabi) fires once per file at most, on
// whichever vector function comes first, so it cannot police this rule; it
// is silenced in the kernels that include this header.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace gradmesh::kernels::simd {

using Vec16 = float __attribute__((vector_size(64)));
using Vec8 = float __attribute__((vector_size(32)));

template <class V>
[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
[[gnu::always_inline]] inline void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
// Every lane x. (x - 0 is x for every x, -0 and NaN included, and compiles
// to one broadcast; a lane-by-lane fill compiles to masked inserts.)
template <class V>
[[gnu::always_inline]] inline V splat(float x) {
  if constexpr (sizeof(V) == sizeof(float)) {
    return x;
  } else {
    return x - V{};
  }
}

// The lanes' sum, from lane 0 up: the same order at every level.
[[gnu::always_inline]] inline float lane_sum(const Vec16& v) {
  float s = v[0];
  for (int i = 1; i < 16; ++i) s += v[i];
  return s;
}

// a * b + c. kFma: rounded once (fused), lane by lane, which the copies for
// FMA-capable levels compile to one instruction and the baseline copy to
// libm's exact software fma: the same bits either way. Otherwise rounded
// twice (a product, then a sum) as plain arithmetic. The build never lets
// the compiler fuse on its own (ISO C++ mode: -ffp-contract=off).
// a may be a scalar, used in every lane.
template <bool kFma, class A, class V>
[[gnu::always_inline]] inline V madd(const A& a, const V& b, const V& c) {
  if constexpr (!kFma) {
    return a * b + c;
  } else if constexpr (sizeof(V) == sizeof(float)) {
    return __builtin_fmaf(a, b, c);
  } else {
    V r;
    for (size_t i = 0; i < sizeof(V) / sizeof(float); ++i) {
      if constexpr (sizeof(A) == sizeof(float)) r[i] = __builtin_fmaf(a, b[i], c[i]);
      else r[i] = __builtin_fmaf(a[i], b[i], c[i]);
    }
    return r;
  }
}

}  // namespace gradmesh::kernels::simd
