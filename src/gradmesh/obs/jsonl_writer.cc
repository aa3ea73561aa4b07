#include "gradmesh/obs/jsonl_writer.h"

#include <cerrno>
#include <cstring>

#include "gradmesh/core/error.h"

namespace gradmesh::obs {

JsonlWriter::JsonlWriter(const std::string& path, bool append)
    : path_(path), file_(std::fopen(path.c_str(), append ? "a" : "w")) {
  if (file_ == nullptr) throw_error(ErrorKind::kIo, path, std::string("cannot create: ") + std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::write(const JsonObject& object) {
  const std::string line = object.str() + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    const int err = errno;
    throw_error(ErrorKind::kIo, path_,
                std::string("appending a line failed: ") + (err ? std::strerror(err) : "unknown error") +
                    " (is the disk full?)");
  }
}

}  // namespace gradmesh::obs
