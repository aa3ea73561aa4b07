#include "gradmesh/core/log.h"

#include <atomic>
#include <cstdio>

#include "gradmesh/core/env.h"

namespace gradmesh {
namespace {

std::atomic<int> g_rank{-1};

LogLevel parse_level() {
  const std::string value = env_string("GRADMESH_DEBUG");
  if (value == "ERROR") return LogLevel::kError;
  if (value == "WARN") return LogLevel::kWarn;
  if (value == "TRACE") return LogLevel::kTrace;
  return LogLevel::kInfo;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kTrace: return "trace";
  }
  return "?";
}

}  // namespace

void set_log_rank(int rank) { g_rank = rank; }

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = parse_level();
  return level <= threshold;
}

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  const int rank = g_rank.load();
  // One fprintf per line so lines from concurrent ranks do not interleave mid-line.
  if (rank >= 0)
    std::fprintf(stderr, "[rank %d] %s: %s\n", rank, level_name(level), message.c_str());
  else
    std::fprintf(stderr, "gradmesh %s: %s\n", level_name(level), message.c_str());
}

}  // namespace gradmesh
