#include "gradmesh/train/gemm_roofs.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"
#include "gradmesh/kernels/gemm_timing.h"

namespace gradmesh::train {
namespace {

constexpr int64_t kRoofN = 1024;
constexpr int kRoofRepeats = 5;
constexpr const char* kHeader = "gradmesh gemm roofs 1";

std::string plain_env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// The first "model name" and "flags" lines of /proc/cpuinfo.
std::string cpu_identity() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(in, line) && (model.empty() || flags.empty())) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line;
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  return model + "\n" + flags;
}

// FNV-1a: a stable name for everything the roofs depend on.
std::string cache_key(int threads, const std::string& bf16_isa) {
  const std::string what = cpu_identity() + "\nthreads " + std::to_string(threads) + "\nopenblas " +
                           plain_env("OPENBLAS_CORETYPE") + "\nonednn " + bf16_isa;
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : what) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string cache_dir() {
  const std::string configured = env_string("GRADMESH_ROOFS_CACHE");
  if (!configured.empty()) return configured;
  if (const std::string xdg = plain_env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/gradmesh";
  if (const std::string home = plain_env("HOME"); !home.empty()) return home + "/.cache/gradmesh";
  return "";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%MZ", &tm);
  return text;
}

// Reads a record written by write_record; false (and `why`) for anything else.
bool read_record(const std::string& path, GemmRoofs& roofs, std::string& why) {
  std::ifstream in(path);
  if (!in) return false;  // not measured yet: nothing to explain
  std::string header, f32_word, bf16_word, measured_word;
  std::getline(in, header);
  std::string f32_text, bf16_text;
  in >> f32_word >> f32_text >> bf16_word >> bf16_text >> measured_word >> roofs.measured;
  const auto f32 = try_parse_double(f32_text, 1e-3, 1e9), bf16 = try_parse_double(bf16_text, 1e-3, 1e9);
  if (header != kHeader || f32_word != "f32" || bf16_word != "bf16" || measured_word != "measured" || !f32 ||
      !bf16) {
    why = path + " does not hold a roof record; measured again";
    return false;
  }
  roofs.f32_gflops = *f32;
  roofs.bf16_gflops = *bf16;
  return true;
}

}  // namespace

GemmRoofs gemm_roofs() {
  GemmRoofs roofs;
  const std::string dir = cache_dir();
  if (dir == "off") return roofs;
  roofs.known = true;
  roofs.threads = kernels::num_threads();
  roofs.bf16_isa = kernels::bf16_support().isa;
  const std::string path = dir.empty() ? "" : dir + "/gemm-roofs-" + cache_key(roofs.threads, roofs.bf16_isa) + ".txt";
  if (!path.empty() && read_record(path, roofs, roofs.note)) {
    roofs.cache = path;
    return roofs;
  }
  roofs.f32_gflops = kernels::time_square_gemm(kernels::MatmulPrecision::kFp32, kRoofN, kRoofRepeats).gflops;
  roofs.bf16_gflops = kernels::time_square_gemm(kernels::MatmulPrecision::kBf16, kRoofN, kRoofRepeats).gflops;
  roofs.measured = utc_now();
  if (path.empty()) return roofs;
  std::ostringstream record;
  record << kHeader << "\nf32 " << roofs.f32_gflops << "\nbf16 " << roofs.bf16_gflops << "\nmeasured "
         << roofs.measured << "\n";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  try {
    write_file_atomically(path, record.str());
    roofs.cache = path;
  } catch (const std::exception& e) {
    roofs.note = std::string("not cached: ") + e.what();
  }
  return roofs;
}

std::string describe(const GemmRoofs& roofs) {
  char text[256];
  std::snprintf(text, sizeof text, "GEMM roofs on %d thread%s: float32 %.0f GFLOP/s, bf16 %.0f GFLOP/s (oneDNN on %s)",
                roofs.threads, roofs.threads == 1 ? "" : "s", roofs.f32_gflops, roofs.bf16_gflops,
                roofs.bf16_isa.c_str());
  std::string out = text;
  out += "; measured " + roofs.measured;
  if (!roofs.cache.empty()) out += ", cached in " + roofs.cache;
  if (!roofs.note.empty()) out += " (" + roofs.note + ")";
  return out;
}

}  // namespace gradmesh::train
