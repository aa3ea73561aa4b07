#include "gradmesh/cli/self_executable.h"

#include <filesystem>
#include <system_error>

#include "gradmesh/core/error.h"

namespace gradmesh::cli {

std::string self_executable() {
  std::error_code error;
  const std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw_error(ErrorKind::kIo, "/proc/self/exe", "cannot find the gradmesh executable: " + error.message());
  return path.string();
}

}  // namespace gradmesh::cli
