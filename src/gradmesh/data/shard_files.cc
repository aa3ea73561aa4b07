// ShardFiles (shard_files.h) for a local directory: every shard opened once,
// read with pread from any thread; and the choice between a directory and a URL.
#include "gradmesh/data/shard_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "gradmesh/core/error.h"
#include "gradmesh/core/resource_usage.h"
#include "gradmesh/data/mds.h"

namespace gradmesh::data {

namespace {

class LocalShardFiles final : public ShardFiles {
 public:
  explicit LocalShardFiles(std::string dir) : dir_(std::move(dir)) {}
  ~LocalShardFiles() override {
    for (int fd : fds_) ::close(fd);
  }
  LocalShardFiles(const LocalShardFiles&) = delete;
  LocalShardFiles& operator=(const LocalShardFiles&) = delete;

  std::string where(const std::string& file) const override { return (std::filesystem::path(dir_) / file).string(); }

  std::optional<std::string> read_whole(const std::string& file, int64_t max_bytes) const override {
    const std::string path = where(file);
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    if (static_cast<int64_t>(text.str().size()) > max_bytes)
      throw_error(ErrorKind::kFormat, path, "larger than " + std::to_string(max_bytes >> 20) + " MiB");
    return std::move(text).str();
  }

  std::vector<std::string> open(const std::vector<std::string>& files, const std::vector<int64_t>& sizes,
                                int64_t head_bytes) override {
    std::vector<std::string> heads;
    for (size_t f = 0; f < files.size(); ++f) {
      const std::string path = where(files[f]);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) throw_error(ErrorKind::kIo, path, std::string("cannot open the shard: ") + std::strerror(errno));
      fds_.push_back(fd);  // closed by the destructor, also when a later file is refused
      paths_.push_back(path);
      struct stat st {};
      if (::fstat(fd, &st) != 0 || st.st_size != sizes[f])
        throw_error(ErrorKind::kFormat, path, "is " + std::to_string(st.st_size) + " bytes; index.json says " +
                                                  std::to_string(sizes[f]) + " (truncated or replaced?)");
      std::string head(static_cast<size_t>(std::min(head_bytes, sizes[f])), '\0');
      read(f, 0, head.data(), static_cast<int64_t>(head.size()));
      heads.push_back(std::move(head));
    }
    return heads;
  }

  void read(size_t f, int64_t offset, void* out, int64_t bytes) const override {
    auto* p = static_cast<char*>(out);
    int64_t done = 0;
    while (done < bytes) {
      const ssize_t got = ::pread(fds_[f], p + done, static_cast<size_t>(bytes - done), offset + done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw_error(ErrorKind::kIo, paths_[f] + ": bytes " + std::to_string(offset) + "-" +
                                        std::to_string(offset + bytes - 1),
                    got < 0 ? std::string("read failed: ") + std::strerror(errno) : "the file ends early");
      done += got;
    }
    bytes_ += bytes;
    count_io(IoCounter::kDatasetRead, static_cast<uint64_t>(bytes));
  }

  // The page cache is the cache here.
  void read_once(size_t f, int64_t offset, void* out, int64_t bytes) const override { read(f, offset, out, bytes); }

  int64_t bytes_fetched() const override { return bytes_.load(); }

 private:
  std::string dir_;
  std::vector<int> fds_;
  std::vector<std::string> paths_;
  mutable std::atomic<int64_t> bytes_{0};
};

bool has_prefix_ignoring_case(const std::string& text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  return true;
}

}  // namespace

bool is_http_location(const std::string& location) {
  return has_prefix_ignoring_case(location, "http://") || has_prefix_ignoring_case(location, "https://");
}

std::unique_ptr<ShardFiles> open_shard_files(const std::string& location, const MdsReadOptions& options) {
  if (is_http_location(location)) return open_http_shard_files(location, options);
  // s3://, gs://, file://, ...: a path with "://" is a URL this reader cannot fetch, not a directory.
  const size_t scheme_end = location.find("://");
  if (scheme_end != std::string::npos && scheme_end > 0 &&
      location.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-") >= scheme_end)
    throw_error(ErrorKind::kUsage, location,
                "only http:// and https:// URLs are read; for other storage, serve the set over HTTP or copy it "
                "to a local directory");
  return std::make_unique<LocalShardFiles>(location);
}

}  // namespace gradmesh::data
