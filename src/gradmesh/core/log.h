// Levelled logging to stderr, each line prefixed with the rank ("[rank 3]").
// The level comes from GRADMESH_DEBUG (ERROR, WARN, INFO, TRACE).
#pragma once

#include <string>

namespace gradmesh {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

void set_log_rank(int rank);
bool log_enabled(LogLevel level);
void log_message(LogLevel level, const std::string& message);

inline void log_error(const std::string& m) { log_message(LogLevel::kError, m); }
inline void log_warn(const std::string& m) { log_message(LogLevel::kWarn, m); }
inline void log_info(const std::string& m) { log_message(LogLevel::kInfo, m); }
inline void log_trace(const std::string& m) { log_message(LogLevel::kTrace, m); }

}  // namespace gradmesh
