// Instruction-set levels and the numerics mode of gradmesh's own kernels.
//
// The build targets baseline x86-64. The hot loops of the own kernels
// (attention, GELU, LayerNorm, Winograd transforms, bf16 rounding) are
// compiled once per level below and called through GRADMESH_ISA_DISPATCH,
// which picks the copy for active_isa(): the CPU's best level, capped by
// GRADMESH_MAX_CPU_ISA (as ONEDNN_MAX_CPU_ISA caps oneDNN) or by tests.
//
// Numerics. Every copy performs the same operations per lane in the same
// order, whatever its vector width. With portable numerics the kernels use
// no fused multiply-add (the arithmetic of gradmesh before FMA was used);
// by default they fuse where it saves time, explicitly (never a compiler
// contraction), and an explicit fusion rounds once at every level: the
// baseline copy computes it in software, slowly but with the same bits. So
// both modes give the same bits at every level; they differ from each other
// by rounding.
#pragma once

#include <string>

namespace gradmesh::kernels {

enum class IsaLevel {
  kBaseline,  // x86-64: SSE2
  kAvx2,      // x86-64-v3: AVX2 and FMA
  kAvx512,    // x86-64-v4: AVX-512 F, BW, DQ, VL
};
const char* isa_name(IsaLevel level);  // "baseline", "avx2", "avx512"

// The level the dispatched kernels run at: the CPU's, capped by
// GRADMESH_MAX_CPU_ISA ("baseline", "avx2" or "avx512") when it is set (a
// value other than those is Error(kUsage) naming the variable), or by
// set_max_isa.
IsaLevel active_isa();
IsaLevel cpu_isa();  // the CPU's own level
// Caps the level (tests run every copy this way); a cap above the CPU's
// level runs at the CPU's.
void set_max_isa(IsaLevel cap);

// train.portable_numerics: process-wide, set by the trainer.
void set_portable_numerics(bool portable);
bool portable_numerics();

// One sentence for the start of a run, e.g. "own kernels: avx512, fused
// multiply-add (train.portable_numerics = false)".
std::string describe_numerics();

}  // namespace gradmesh::kernels

// GRADMESH_ISA_VARIANTS(name, (params), (args)) defines three copies of
// `name##_body(args)` (an always-inline function or template) compiled for
// each level, and a function `name(params)` that calls the active level's.
#define GRADMESH_ISA_VARIANTS(name, params, args)                                                    \
  [[gnu::target("arch=x86-64-v4")]] void name##_avx512 params { name##_body args; }                 \
  [[gnu::target("arch=x86-64-v3")]] void name##_avx2 params { name##_body args; }                   \
  void name##_baseline params { name##_body args; }                                                  \
  void name params {                                                                                 \
    switch (::gradmesh::kernels::active_isa()) {                                                     \
      case ::gradmesh::kernels::IsaLevel::kAvx512: return name##_avx512 args;                        \
      case ::gradmesh::kernels::IsaLevel::kAvx2: return name##_avx2 args;                            \
      case ::gradmesh::kernels::IsaLevel::kBaseline: break;                                          \
    }                                                                                                \
    name##_baseline args;                                                                            \
  }
