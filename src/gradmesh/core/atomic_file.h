// Replacing a file so that a crash never leaves it half written.
//
// The body is written to a temporary file in the same directory as `path`
// (same filesystem, so rename is atomic), flushed and fsync'ed, renamed over
// `path`, and then the directory is fsync'ed so the rename itself survives a
// power cut. Readers therefore see either the complete old file or the
// complete new one. The one writer for the files a run leaves (weights,
// config.toml, traces, the report); metrics.jsonl is the exception by design: it is
// appended line by line so that it can be followed while the run goes on.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace gradmesh {

// Writes `path` atomically with the bytes that `write_body` puts into the
// stream it is given.
//
// `write_body` may ignore the results of fwrite/fputs: the stream's error
// flag is checked after it returns, and a failed write is reported as
// Error(kIo) naming `path`. If `write_body` throws, the temporary file is
// removed, `path` is left untouched and the exception propagates unchanged.
// The stream stays owned by this function: `write_body` must not close it.
//
// The temporary file is named "<path>.tmp.<pid>.<n>"; only a crash between
// its creation and the rename can leave one behind, never a torn `path`.
// A symlink at `path` is replaced by the new file rather than followed.
// The new file gets mode 0666 minus the process umask, like fopen(path, "w").
// REQUIRES: the directory of `path` exists and is writable.
void write_file_atomically(const std::string& path, const std::function<void(std::FILE*)>& write_body);

// Writes `path` atomically with exactly `contents`; same guarantees and errors.
void write_file_atomically(const std::string& path, std::string_view contents);

// Writes `size` bytes to `out`; a short write sets the stream error flag,
// which write_file_atomically reports. A convenience for body callbacks.
inline void write_bytes(std::FILE* out, const void* data, size_t size) {
  if (size > 0) std::fwrite(data, 1, size, out);
}

}  // namespace gradmesh
