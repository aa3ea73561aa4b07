// Runs the real gradmesh binary as a user would and captures what it printed.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gradmesh::testing {

struct CommandResult {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` is appended to the binary path as-is (the caller quotes).
inline CommandResult run_gradmesh(const std::string& args, const std::string& workdir) {
  const std::string out = workdir + "/stdout.txt", err = workdir + "/stderr.txt";
  const std::string cmd = "cd '" + workdir + "' && GRADMESH_PROGRESS=lines '" GRADMESH_BINARY "' " + args + " > '" +
                          out + "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, read_text(out), read_text(err)};
}

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gradmesh-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(file(name), std::ios::binary) << text; }

 private:
  std::string path_;
};

inline const char* kDataDir = "/usr/share/datasets/fashion-mnist";

inline bool have_dataset() { return std::filesystem::exists(std::string(kDataDir) + "/t10k-images-idx3-ubyte.gz"); }

}  // namespace gradmesh::testing
