// Turns a worker's output stream into whole lines tagged with its rank.
//
// The launcher reads every worker's stdout and stderr pipes in one thread and
// hands the bytes to one LinePrefixer per stream. A line is written only once
// it is complete, prefix and newline included, in a single write(2) call per
// batch, so lines of different ranks never interleave mid-line on the
// launcher's stdout/stderr. The raw line (no prefix) also goes to the rank's
// log file when there is one; stdout and stderr lines of one rank share that
// file, again whole lines only.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gradmesh::elastic {

class LinePrefixer {
 public:
  // A line longer than this without a newline is emitted in pieces of this
  // size, so a worker printing megabytes without '\n' cannot grow memory.
  static constexpr size_t kMaxLine = 64 * 1024;

  // `out_fd` and `log_fd` (-1 = none) are borrowed, not closed.
  LinePrefixer(std::string prefix, int out_fd, int log_fd);

  // Writes every line completed by `bytes`; keeps the unfinished tail.
  void feed(std::string_view bytes);
  // Writes the unfinished tail, if any, as a line (adds the newline).
  void finish();

 private:
  void emit_line(std::string_view line, std::string& out_batch, std::string& log_batch) const;
  void flush(const std::string& out_batch, const std::string& log_batch) const;

  std::string prefix_;
  int out_fd_;
  int log_fd_;
  std::string pending_;  // bytes after the last newline seen
};

// Writes all of `bytes` to `fd`, retrying short writes and EINTR, and waiting
// while a non-blocking fd is full. A reader that went away (EPIPE) or any
// other error drops the rest: losing output must never stop the launcher.
void write_fully(int fd, std::string_view bytes);

}  // namespace gradmesh::elastic
