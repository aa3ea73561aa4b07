// The GEMM roofs a run is measured against: float32 (OpenBLAS sgemm) and
// bf16 (oneDNN) GFLOP/s on this machine at the run's thread count,
// measured once and cached, printed at the start of a run so that its
// achieved GEMM GFLOP/s can be read as a fraction of what the CPU can do.
#pragma once

#include <string>

namespace gradmesh::train {

struct GemmRoofs {
  bool known = false;    // false: GRADMESH_ROOFS_CACHE=off, nothing measured
  int threads = 0;
  double f32_gflops = 0;
  double bf16_gflops = 0;
  std::string bf16_isa;  // what oneDNN multiplies bf16 on
  std::string measured;  // UTC time of the measurement, e.g. 2026-12-06T18:00Z
  std::string cache;     // the file it is cached in ("" when not cached)
  std::string note;      // why the cache was not used, when it was not ("" otherwise)
};

// The roofs at the current kernels::num_threads(): read from the cache when
// it holds them for this CPU (model and flags), thread count, OpenBLAS core
// type and oneDNN ISA, else measured (n = 1024, a fraction of a second) and
// written there. The cache is $GRADMESH_ROOFS_CACHE, else
// $XDG_CACHE_HOME/gradmesh, else ~/.cache/gradmesh; a file that cannot be
// read as a roof record is measured again and replaced.
GemmRoofs gemm_roofs();

// "GEMM roofs on 1 thread: float32 173 GFLOP/s, bf16 563 GFLOP/s (oneDNN on
// avx512_core_amx); measured 2026-12-06T18:00Z, cached in PATH".
std::string describe(const GemmRoofs& roofs);

}  // namespace gradmesh::train
