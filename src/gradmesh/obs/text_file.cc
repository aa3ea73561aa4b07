#include "gradmesh/obs/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gradmesh/core/error.h"

namespace gradmesh::obs {

void write_text_file(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) throw_error(ErrorKind::kIo, path, std::string("cannot create: ") + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    std::remove(temp.c_str());
    throw_error(ErrorKind::kIo, path, std::string("cannot write: ") + std::strerror(saved));
  }
}

}  // namespace gradmesh::obs
