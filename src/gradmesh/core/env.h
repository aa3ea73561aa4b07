// Every GRADMESH_* environment variable, declared once (env.cc) with its
// default and meaning; docs/env.md is generated from the same table
// (`gradmesh env`), and reading an undeclared name is a bug caught at once.
#pragma once

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
// The registry as a Markdown table (docs/env.md).
std::string env_markdown();

}  // namespace gradmesh
