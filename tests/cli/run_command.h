// Runs the real gradmesh binary as a user would and captures what it printed.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/temp_dir.h"

namespace gradmesh::testing {

struct CommandResult {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::string& path) { return read_file(path); }

// Runs a shell command line in `workdir` with GRADMESH_PROGRESS=lines and captures its output.
inline CommandResult run_shell(const std::string& command, const std::string& workdir) {
  const std::string out = workdir + "/stdout.txt", err = workdir + "/stderr.txt";
  const std::string cmd = "cd '" + workdir + "' && export GRADMESH_PROGRESS=lines && " + command + " > '" + out +
                          "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, read_text(out), read_text(err)};
}

// `args` is appended to the binary path as-is (the caller quotes).
inline CommandResult run_gradmesh(const std::string& args, const std::string& workdir) {
  return run_shell("'" GRADMESH_BINARY "' " + args, workdir);
}

// Each (flags, message): `command flags` exits 2 and its stderr holds the message.
inline void expect_usage_errors(const std::string& command,
                                const std::vector<std::pair<std::string, std::string>>& cases,
                                const std::string& workdir) {
  for (const auto& [flags, message] : cases) {
    const CommandResult r = run_gradmesh(command + " " + flags, workdir);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << "\n" << r.err;
  }
}

inline const char* kDataDir = "/usr/share/datasets/fashion-mnist";

inline bool have_dataset() { return std::filesystem::exists(std::string(kDataDir) + "/t10k-images-idx3-ubyte.gz"); }

// Debian's fortunes: the text corpus the GPT tests train on.
inline const char* kFortunes = "/usr/share/games/fortunes/science";

}  // namespace gradmesh::testing
