// Running a shell command for its exit status and output: what setting up
// emulated hosts (ip, tc, redis-server) needs, and tests around it.
#pragma once

#include <string>

namespace gradmesh {

// Runs `command` with /bin/sh, stderr folded into stdout; returns the status
// pclose reports (0 on success, -1 when the shell could not start) and
// appends the output to `output` when given.
int run_shell_command(const std::string& command, std::string* output = nullptr);

}  // namespace gradmesh
