// Append-only JSON Lines file: one object per line, flushed per line so a
// crash loses at most the line being written and `tail -f` shows progress.
// (Not written atomically on purpose: it grows while the run goes on.)
#pragma once

#include <cstdio>
#include <string>

#include "gradmesh/obs/json_object.h"

namespace gradmesh::obs {

class JsonlWriter {
 public:
  // Creates or truncates the file (append: keeps what a resumed run wrote
  // before); Error(kIo) naming the path.
  explicit JsonlWriter(const std::string& path, bool append = false);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  // Appends `object` as one line, with "time" (Unix seconds) added unless it
  // has one, and flushes it; a failed write or flush
  // (disk full, I/O error) is Error(kIo) naming the path.
  void write(const JsonObject& object);

 private:
  std::string path_;
  std::FILE* file_;
};

}  // namespace gradmesh::obs
