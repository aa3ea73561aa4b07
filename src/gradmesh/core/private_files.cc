#include "gradmesh/core/private_files.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

namespace gradmesh {

void create_private_directories(const std::string& dir, std::error_code& ec) {
  ec.clear();
  if (dir.empty()) return;
  std::filesystem::path path;
  for (const auto& part : std::filesystem::path(dir)) {
    path /= part;
    if (::mkdir(path.c_str(), kPrivateDirMode) == 0 || errno == EEXIST) continue;
    ec = std::error_code(errno, std::generic_category());
    return;
  }
  if (!std::filesystem::is_directory(dir, ec) && !ec) ec = std::make_error_code(std::errc::not_a_directory);
}

void restrict_new_files_to_owner() { ::umask(077); }

}  // namespace gradmesh
