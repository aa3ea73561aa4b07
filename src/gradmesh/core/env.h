// Every GRADMESH_* environment variable, declared once (env.cc) with its
// default and meaning; docs/env.md is generated from the same table
// (`gradmesh env`), and reading an undeclared name is a bug caught at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh {

struct EnvVar {
  const char* name;
  const char* default_value;
  const char* doc;
};

const std::vector<EnvVar>& env_registry();

// The variable's value, or its declared default when unset.
// REQUIRES: `name` is declared in env_registry().
std::string env_string(const char* name);
// 1/true/yes/on and 0/false/no/off (case-insensitive); anything else is a usage error.
bool env_flag(const char* name, bool fallback);
// An integer variable: nullopt when unset or empty; anything but a decimal
// integer in [min, max] (core/parse_number.h) is Error(kUsage) naming it.
// Also reads the launcher's own variables (RANK, LOCAL_WORLD_SIZE, ...);
// a GRADMESH_* name must be declared.
std::optional<int64_t> env_int(const char* name, int64_t min, int64_t max);

// GRADMESH_COMM_TIMEOUT, by its one rule (every reader calls this): seconds,
// a finite number from kMinCommTimeoutSeconds to kMaxCommTimeoutSeconds;
// unset means the declared default. Anything else ("", "inf", "1e300",
// "10s") is Error(kUsage) naming the variable.
inline constexpr double kMinCommTimeoutSeconds = 0.001;  // a millisecond, the unit timeouts are kept in
inline constexpr double kMaxCommTimeoutSeconds = 7 * 24 * 3600;  // a week: longer is a typo, not a timeout
std::chrono::milliseconds env_comm_timeout();
// GRADMESH_STORE_TIMEOUT: how long a store client reconnects before it fails
// (1 to 3600 s; a malformed value is Error(kUsage) naming the variable).
std::chrono::milliseconds env_store_timeout();

// The registry as a Markdown table (docs/env.md).
std::string env_markdown();

}  // namespace gradmesh
