#include "gradmesh/train/run_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <system_error>

#include "gradmesh/core/error.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh::train {

std::string new_run_id() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
  // Only names the directory; training randomness never comes from here.
  std::random_device device;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", device() & 0xffffu);
  return std::string(stamp) + "-" + suffix;
}

std::string create_run_dir(const std::string& parent, const std::string& id, bool reuse) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(parent) / id;
  std::error_code ec;
  create_private_directories(parent, ec);
  if (ec) throw_error(ErrorKind::kIo, parent, "cannot create the output directory: " + ec.message());
  if (::mkdir(dir.c_str(), kPrivateDirMode) != 0) {
    const int error = errno;
    if (error == EEXIST && reuse && fs::is_directory(dir, ec)) return dir.string();
    if (error != EEXIST)
      throw_error(ErrorKind::kIo, dir.string(), std::string("cannot create the run directory: ") + std::strerror(error));
    throw_error(ErrorKind::kConfig, dir.string(),
                "run directory already exists; choose another output.run_id, remove it, or continue it with --resume auto");
  }
  return dir.string();
}

}  // namespace gradmesh::train
