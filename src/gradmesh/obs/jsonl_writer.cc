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

}  // namespace

JsonlWriter::JsonlWriter(const std::string& path, bool append)
    : path_(path), file_(std::fopen(path.c_str(), append ? "a" : "w")) {
  if (file_ == nullptr) throw_error(ErrorKind::kIo, path, std::string("cannot create: ") + std::strerror(errno));
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
