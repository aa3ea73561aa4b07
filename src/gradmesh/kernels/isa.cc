#include "gradmesh/kernels/isa.h"

#include <atomic>
#include <mutex>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"

namespace gradmesh::kernels {
namespace {

// -1 until the first call reads the CPU and GRADMESH_MAX_CPU_ISA; the
// dispatch reads it on every kernel call, so it is one relaxed load.
std::atomic<int> g_active{-1};
std::atomic<bool> g_portable{false};
std::mutex g_init_mutex;

IsaLevel detect_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return IsaLevel::kAvx512;
  if (__builtin_cpu_supports("x86-64-v3")) return IsaLevel::kAvx2;
  return IsaLevel::kBaseline;
}

IsaLevel env_cap() {
  const std::string text = env_string("GRADMESH_MAX_CPU_ISA");
  if (text.empty() || text == "avx512") return IsaLevel::kAvx512;
  if (text == "avx2") return IsaLevel::kAvx2;
  if (text == "baseline") return IsaLevel::kBaseline;
  throw_error(ErrorKind::kUsage, "environment variable GRADMESH_MAX_CPU_ISA",
              "expected baseline, avx2 or avx512 (or unset for the CPU's best), got '" + text + "'");
}

IsaLevel lower(IsaLevel a, IsaLevel b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

}  // namespace

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline: return "baseline";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "?";
}

IsaLevel cpu_isa() {
  static const IsaLevel level = detect_cpu();
  return level;
}

IsaLevel active_isa() {
  const int level = g_active.load(std::memory_order_relaxed);
  if (level >= 0) return static_cast<IsaLevel>(level);
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_active.load() < 0) g_active.store(static_cast<int>(lower(cpu_isa(), env_cap())));
  return static_cast<IsaLevel>(g_active.load());
}

void set_max_isa(IsaLevel cap) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  g_active.store(static_cast<int>(lower(cpu_isa(), cap)));
}

void set_portable_numerics(bool portable) { g_portable.store(portable, std::memory_order_relaxed); }
bool portable_numerics() { return g_portable.load(std::memory_order_relaxed); }

std::string describe_numerics() {
  const IsaLevel level = active_isa();
  std::string text = std::string("own kernels: ") + isa_name(level);
  if (level != cpu_isa()) text += std::string(" (capped by GRADMESH_MAX_CPU_ISA; the CPU has ") + isa_name(cpu_isa()) + ")";
  if (portable_numerics()) return text + ", no fused multiply-add (train.portable_numerics = true)";
  text += ", fused multiply-add (train.portable_numerics = false)";
  if (level == IsaLevel::kBaseline)
    text += "; without FMA instructions the fused operations run in software: train.portable_numerics = true is "
            "faster here";
  return text;
}

}  // namespace gradmesh::kernels
