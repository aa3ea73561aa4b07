#include "gradmesh/core/shell.h"

#include <cstdio>

namespace gradmesh {

int run_shell_command(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buffer[512];
  std::string text;
  while (std::fgets(buffer, sizeof buffer, pipe)) text += buffer;
  const int status = ::pclose(pipe);
  if (output) *output += text;
  return status;
}

}  // namespace gradmesh
