#include "gradmesh/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>

#include "gradmesh/core/error.h"
#include "gradmesh/core/resource_usage.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh::checkpoint {
namespace {

// Large enough that a tens-of-MB file is a few dozen write(2) calls.
constexpr size_t kBufferBytes = 1 << 20;

XXH64_state_t* as_state(void* state) { return static_cast<XXH64_state_t*>(state); }

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int open_for_reading(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error("cannot open", path, errno);
  return fd;
}

// Reads up to `size` bytes, retrying interrupted calls; 0 means end of file.
size_t read_some(int fd, const std::string& path, void* out, size_t size) {
  for (;;) {
    const ssize_t got = ::read(fd, out, size);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) throw_io_error("cannot read", path, errno);
  }
}

}  // namespace

void throw_io_error(const std::string& what, const std::string& path, int err) {
  throw Error(ErrorKind::kIo, what + " '" + path + "': " + (err == 0 ? "unknown error" : std::strerror(err)));
}

std::string xxh64_hex(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

DurableFileWriter::DurableFileWriter(std::string path) : path_(std::move(path)), buffer_(kBufferBytes) {
  hash_state_ = XXH64_createState();
  if (hash_state_ == nullptr) throw std::bad_alloc();
  XXH64_reset(as_state(hash_state_), 0);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int err = errno;
    XXH64_freeState(as_state(hash_state_));
    throw_io_error("cannot create", path_, err);
  }
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  XXH64_freeState(as_state(hash_state_));
}

void DurableFileWriter::append(const void* data, size_t size) {
  XXH64_update(as_state(hash_state_), data, size);
  bytes_ += size;
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const size_t take = std::min(size, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes, take);
    buffered_ += take;
    bytes += take;
    size -= take;
    if (buffered_ == buffer_.size()) flush_buffer();
  }
}

void DurableFileWriter::flush_buffer() {
  size_t done = 0;
  while (done < buffered_) {
    const ssize_t wrote = ::write(fd_, buffer_.data() + done, buffered_ - done);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      throw_io_error("cannot write", path_, errno);
    }
    done += static_cast<size_t>(wrote);
  }
  count_io(IoCounter::kCheckpointWritten, buffered_);
  buffered_ = 0;
}

void DurableFileWriter::finish() {
  flush_buffer();
  if (::fsync(fd_) != 0) throw_io_error("cannot fsync", path_, errno);
  const int fd = fd_;
  fd_ = -1;  // close releases the descriptor even when it reports an error
  if (::close(fd) != 0) throw_io_error("cannot close", path_, errno);
}

uint64_t DurableFileWriter::xxh64() const { return XXH64_digest(as_state(hash_state_)); }

FileDigest digest_file(const std::string& path) {
  Descriptor fd(open_for_reading(path));
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state(XXH64_createState(), XXH64_freeState);
  if (!state) throw std::bad_alloc();
  XXH64_reset(state.get(), 0);
  std::vector<unsigned char> chunk(kBufferBytes);
  FileDigest digest;
  for (;;) {
    const size_t got = read_some(fd.get(), path, chunk.data(), chunk.size());
    if (got == 0) break;
    XXH64_update(state.get(), chunk.data(), got);
    digest.bytes += got;
  }
  digest.xxh64 = XXH64_digest(state.get());
  return digest;
}

std::string read_file_bytes(const std::string& path) {
  Descriptor fd(open_for_reading(path));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw_io_error("cannot stat", path, errno);
  if (!S_ISREG(info.st_mode)) throw Error(ErrorKind::kIo, "'" + path + "' is not a regular file");
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t filled = 0;
  for (;;) {
    if (filled == bytes.size()) bytes.resize(bytes.size() + kBufferBytes);  // the file grew
    const size_t got = read_some(fd.get(), path, bytes.data() + filled, bytes.size() - filled);
    if (got == 0) break;
    filled += got;
  }
  bytes.resize(filled);
  return bytes;
}

void fsync_directory(const std::string& dir) {
  Descriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw_io_error("cannot open directory", dir, errno);
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != ENOTSUP) throw_io_error("cannot fsync directory", dir, errno);
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), kPrivateDirMode) != 0) throw_io_error("cannot create directory", path, errno);
}

void rename_path(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    throw Error(ErrorKind::kIo, "cannot rename '" + from + "' to '" + to + "': " + std::strerror(err));
  }
}

void remove_tree(const std::string& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) throw_io_error("cannot remove", path, error.value());
}

bool is_directory(const std::string& path) {
  std::error_code error;
  return std::filesystem::is_directory(path, error);
}

bool path_exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::error_code error;
  std::vector<std::string> names;
  std::filesystem::directory_iterator it(dir, error);
  if (error) throw_io_error("cannot list directory", dir, error.value());
  for (; it != std::filesystem::directory_iterator(); it.increment(error)) {
    if (error) break;
    names.push_back(it->path().filename().string());
  }
  if (error) throw_io_error("cannot list directory", dir, error.value());
  return names;
}

}  // namespace gradmesh::checkpoint
