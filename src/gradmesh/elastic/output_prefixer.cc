#include "gradmesh/elastic/output_prefixer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace gradmesh::elastic {

LinePrefixer::LinePrefixer(std::string prefix, int out_fd, int log_fd)
    : prefix_(std::move(prefix)), out_fd_(out_fd), log_fd_(log_fd) {}

void LinePrefixer::emit_line(std::string_view line, std::string& out_batch, std::string& log_batch) const {
  out_batch.append(prefix_).append(line).push_back('\n');
  if (log_fd_ >= 0) log_batch.append(line).push_back('\n');
}

void LinePrefixer::flush(const std::string& out_batch, const std::string& log_batch) const {
  if (!out_batch.empty()) write_fully(out_fd_, out_batch);
  if (!log_batch.empty()) write_fully(log_fd_, log_batch);
}

void LinePrefixer::feed(std::string_view bytes) {
  std::string out_batch, log_batch;
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      pending_.append(bytes);
      break;
    }
    if (pending_.empty()) {
      emit_line(bytes.substr(0, newline), out_batch, log_batch);
    } else {
      pending_.append(bytes.substr(0, newline));
      emit_line(pending_, out_batch, log_batch);
      pending_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
  while (pending_.size() >= kMaxLine) {
    emit_line(std::string_view(pending_).substr(0, kMaxLine), out_batch, log_batch);
    pending_.erase(0, kMaxLine);
  }
  flush(out_batch, log_batch);
}

void LinePrefixer::finish() {
  if (pending_.empty()) return;
  std::string out_batch, log_batch;
  emit_line(pending_, out_batch, log_batch);
  pending_.clear();
  flush(out_batch, log_batch);
}

void write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return;
    }
  }
}

}  // namespace gradmesh::elastic
