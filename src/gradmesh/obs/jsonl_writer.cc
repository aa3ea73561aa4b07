#include "gradmesh/obs/jsonl_writer.h"

#include <cerrno>
#include <cstring>

#include "gradmesh/core/clock.h"
#include "gradmesh/core/error.h"

namespace gradmesh::obs {
namespace {

bool has_time(const JsonObject& object) {
  for (const auto& field : object.fields())
    if (field.first == "time") return true;
  return false;
}

// Whether the file ends in the middle of a line: a writer killed mid-line
// left it so. The next line must not be glued onto it.
bool ends_mid_line(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return false;
  bool mid = false;
  if (std::fseek(file, -1, SEEK_END) == 0) mid = std::fgetc(file) != '\n';
  std::fclose(file);
  return mid;
}

}  // namespace

JsonlWriter::JsonlWriter(const std::string& path, bool append)
    : path_(path), file_(nullptr) {
  const bool cut_off = append && ends_mid_line(path);
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) throw_error(ErrorKind::kIo, path, std::string("cannot create: ") + std::strerror(errno));
  // The cut-off line stays a line of its own, which readers skip as malformed.
  if (cut_off && (std::fputc('\n', file_) == EOF || std::fflush(file_) != 0))
    throw_error(ErrorKind::kIo, path, std::string("appending failed: ") + std::strerror(errno));
}

JsonlWriter::~JsonlWriter() {
  if (file_) std::fclose(file_);
}

void JsonlWriter::write(const JsonObject& object) {
  // Every line says when it was written, so lines from different processes
  // (a restarted run appends) share one clock: the report's and the
  // dashboard's timelines.
  JsonObject stamped = object;
  if (!has_time(object)) stamped.add("time", static_cast<double>(unix_millis()) / 1e3);
  const std::string line = stamped.str() + "\n";
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    const int err = errno;
    throw_error(ErrorKind::kIo, path_,
                std::string("appending a line failed: ") + (err ? std::strerror(err) : "unknown error") +
                    " (is the disk full?)");
  }
}

}  // namespace gradmesh::obs
