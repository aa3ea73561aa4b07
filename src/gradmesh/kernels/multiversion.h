// GRADMESH_MULTIVERSION: on a function, compiles it once per x86-64 ISA
// level (AVX-512, AVX2, baseline) and picks the clone at load time from the
// CPU (GNU ifunc). The build targets baseline x86-64, so this is how the hot
// SIMD loops use wider registers. Defining it empty beforehand (the TSan
// build does: TSan instruments the ifunc resolvers, which run before its
// runtime is up) builds the baseline alone.
#pragma once

#ifndef GRADMESH_MULTIVERSION
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define GRADMESH_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#endif
#ifndef GRADMESH_MULTIVERSION
#define GRADMESH_MULTIVERSION
#endif
