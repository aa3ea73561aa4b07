#include "gradmesh/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "gradmesh/core/error.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh {
namespace {

std::string errno_text(int err) { return err == 0 ? std::string("unknown error") : std::strerror(err); }

std::string directory_of(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? std::string(".") : parent;
}

// Owns the temporary file until commit(): on any early exit (an exception
// from the body or a failed write) the destructor closes and unlinks it, so
// no temporary file outlives a failed write.
class TempFile {
 public:
  explicit TempFile(const std::string& target) : target_(target) {
    static std::atomic<uint64_t> counter{0};
    // O_EXCL with a fresh name per attempt: a stale file left by a crashed
    // run (same pid reused) is skipped rather than truncated or followed.
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
      const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kPrivateFileMode);
      if (fd >= 0) {
        stream_ = ::fdopen(fd, "wb");
        if (stream_ == nullptr) {
          const int err = errno;
          ::close(fd);
          ::unlink(path_.c_str());
          fail("cannot open a stream on temporary file '" + path_ + "': " + errno_text(err));
        }
        return;
      }
      if (errno != EEXIST) {
        fail("cannot create temporary file '" + path_ + "': " + errno_text(errno) +
             "; check that the directory exists and is writable");
      }
    }
    fail("cannot find a free temporary file name next to it (tried 100 names like '" + path_ + "')");
  }

  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  ~TempFile() {
    if (stream_ != nullptr) std::fclose(stream_);
    if (!committed_) ::unlink(path_.c_str());
  }

  std::FILE* stream() { return stream_; }

  // Flushes, fsyncs, closes and renames over the target. Throws Error(kIo).
  void commit() {
    errno = 0;
    if (std::fflush(stream_) != 0 || std::ferror(stream_)) {
      fail("writing temporary file '" + path_ + "' failed: " + errno_text(errno) + " (is the disk full?)");
    }
    if (::fsync(::fileno(stream_)) != 0) fail("fsync of '" + path_ + "' failed: " + errno_text(errno));
    std::FILE* stream = stream_;
    stream_ = nullptr;  // fclose releases it even when it reports an error
    if (std::fclose(stream) != 0) fail("closing '" + path_ + "' failed: " + errno_text(errno));
    if (std::rename(path_.c_str(), target_.c_str()) != 0) {
      fail("renaming '" + path_ + "' over it failed: " + errno_text(errno));
    }
    committed_ = true;
    sync_directory();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw_error(ErrorKind::kIo, target_, what); }

  // Without this the rename may still be only in the page cache: after a
  // power cut the directory could point at the old file (or at nothing).
  void sync_directory() const {
    const std::string dir = directory_of(target_);
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("cannot open directory '" + dir + "' to fsync it: " + errno_text(errno));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    // Some filesystems cannot fsync a directory; the rename is as durable there as it gets.
    if (rc != 0 && err != EINVAL && err != ENOTSUP) {
      fail("fsync of directory '" + dir + "' failed: " + errno_text(err));
    }
  }

  std::string target_;
  std::string path_;
  std::FILE* stream_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::FILE*)>& write_body) {
  TempFile temp(path);
  write_body(temp.stream());
  temp.commit();
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  write_file_atomically(path, [contents](std::FILE* out) { write_bytes(out, contents.data(), contents.size()); });
}

}  // namespace gradmesh
