#include "gradmesh/comm/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <optional>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "gradmesh/comm/endpoint.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh::comm {
namespace {

// File names stay well under NAME_MAX (255) with room for the hash suffix.
constexpr size_t kMaxPlainName = 200;

std::string os_error(int err) { return std::strerror(err); }

// The directory-wide exclusive flock for one read-modify-write. Each holder
// opens its own descriptor: flock excludes per open file description, so a
// descriptor shared by threads or inherited by a fork would not exclude.
class DirLock {
 public:
  DirLock(const std::string& path, const std::string& store) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, kPrivateFileMode);
    if (fd_ < 0) throw_error(ErrorKind::kIo, store, "cannot open lock file " + path + ": " + os_error(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd_);
      throw_error(ErrorKind::kIo, store, "cannot lock " + path + ": " + os_error(err));
    }
  }
  ~DirLock() { ::close(fd_); }  // closing the last descriptor releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

std::string quoted_value(const std::string& value) {
  constexpr size_t kShown = 40;
  std::string shown = printable_key(value.substr(0, kShown));
  return "'" + shown + (value.size() > kShown ? "...'" : "'");
}

}  // namespace

FileStore::FileStore(const std::string& dir) {
  std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
  std::error_code ec;
  path = std::filesystem::absolute(path, ec);
  dir_ = path.string();
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  create_private_directories(dir_, ec);
  if (ec) throw_error(ErrorKind::kIo, describe(), "cannot create the store directory: " + ec.message());
  if (!std::filesystem::is_directory(dir_, ec))
    throw_error(ErrorKind::kIo, describe(), "exists but is not a directory; pick another path");
  int fd = ::open((dir_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, kPrivateFileMode);
  if (fd < 0)
    throw_error(ErrorKind::kIo, describe(),
                "the store directory is not writable (" + os_error(errno) + "); check its permissions");
  ::close(fd);
}

std::string FileStore::key_path(const std::string& key) const {
  static const char* kHex = "0123456789ABCDEF";
  std::string name = "k_";
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  if (name.size() > kMaxPlainName) {
    // '~' is always percent-encoded above, so hashed names never equal plain ones.
    char hash[24];
    std::snprintf(hash, sizeof hash, "~%016llx", static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
    name = name.substr(0, kMaxPlainName - 24) + hash;
  }
  return dir_ + "/" + name;
}

std::optional<std::string> FileStore::read_key(const std::string& key) const {
  std::string path = key_path(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_error(ErrorKind::kIo, describe(), "cannot read key '" + printable_key(key) + "' (" + path + "): " + os_error(errno));
  }
  std::string value;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      value.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      int err = errno;
      ::close(fd);
      throw_error(ErrorKind::kIo, describe(), "cannot read key '" + printable_key(key) + "' (" + path + "): " + os_error(err));
    }
  }
  ::close(fd);
  return value;
}

std::string FileStore::write_temp(const std::string& key, const std::string& value) const {
  static std::atomic<uint64_t> counter{0};
  std::string temp;
  auto fail = [&](const std::string& step, int err, int fd) {
    if (fd >= 0) ::close(fd);
    if (fd >= 0 || step == "close") ::unlink(temp.c_str());
    throw_error(ErrorKind::kIo, describe(),
                "cannot " + step + " key '" + printable_key(key) + "' (" + temp + "): " + os_error(err) +
                    "; check free space and permissions");
  };
  int fd = -1;
  do {
    // Names start with '.', so they never look like a key's file. Processes
    // in other PID namespaces may share a pid: O_EXCL turns that into a retry.
    temp = dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kPrivateFileMode);
  } while (fd < 0 && errno == EEXIST);
  if (fd < 0) fail("create", errno, -1);
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", errno, fd);
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail("close", errno, -1);
  return temp;
}

void FileStore::rename_into(const std::string& temp, const std::string& key) const {
  std::string path = key_path(key);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    throw_error(ErrorKind::kIo, describe(), "cannot publish key '" + printable_key(key) + "' (" + path + "): " + os_error(err));
  }
}

void FileStore::set(const std::string& key, const std::string& value) {
  // Written outside the lock; only the rename is ordered against
  // add/compare_set, so their read-modify-write cannot lose this value.
  std::string temp = write_temp(key, value);
  DirLock lock(dir_ + "/.lock", describe());
  rename_into(temp, key);
}

std::string FileStore::get(const std::string& key, Millis timeout) {
  std::string value;
  bool found = poll_until(timeout, [&] {
    std::optional<std::string> current = read_key(key);
    if (current) value = std::move(*current);
    return current.has_value();
  });
  if (!found) throw_store_timeout(describe(), timeout, {key});
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  DirLock lock(dir_ + "/.lock", describe());
  std::optional<std::string> current = read_key(key);
  int64_t value = 0;
  if (current) {
    const std::optional<int64_t> number = try_parse_int(*current);
    if (!number)
      throw_error(ErrorKind::kFormat, describe(),
                  "add to key '" + printable_key(key) + "': its value " + quoted_value(*current) +
                      " is not a decimal integer; add only works on keys that add created or that were set to a number");
    value = *number;
  }
  const int64_t result = add_without_overflow(describe(), key, value, delta);
  rename_into(write_temp(key, std::to_string(result)), key);
  return result;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  DirLock lock(dir_ + "/.lock", describe());
  std::optional<std::string> current = read_key(key);
  if (current ? *current == expected : expected.empty()) {
    rename_into(write_temp(key, desired), key);
    return desired;
  }
  return current.value_or("");
}

void FileStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  if (poll_until(timeout, [&] { return check(keys); })) return;
  std::vector<std::string> missing;
  for (const std::string& key : keys)
    if (!check({key})) missing.push_back(key);
  if (missing.empty()) return;  // the last ones arrived after the final poll
  throw_store_timeout(describe(), timeout, missing);
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    struct stat info;
    std::string path = key_path(key);
    if (::stat(path.c_str(), &info) == 0) continue;
    if (errno == ENOENT) return false;
    throw_error(ErrorKind::kIo, describe(), "cannot check key '" + printable_key(key) + "' (" + path + "): " + os_error(errno));
  }
  return true;
}

bool FileStore::remove(const std::string& key) {
  DirLock lock(dir_ + "/.lock", describe());
  std::string path = key_path(key);
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  throw_error(ErrorKind::kIo, describe(), "cannot remove key '" + printable_key(key) + "' (" + path + "): " + os_error(errno));
}

}  // namespace gradmesh::comm
