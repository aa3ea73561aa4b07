// The file-system steps of the checkpoint commit and of its verification,
// each failing with Error(kIo) that names the path and the errno text.
//
// Internal to checkpoint/: the writer and the reader share these so that the
// bytes and xxh64 a manifest records are computed the same way the loader
// recomputes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::checkpoint {

// "<what> '<path>': <strerror(err)>" as Error(kIo).
[[noreturn]] void throw_io_error(const std::string& what, const std::string& path, int err);

// XXH64 with seed 0 as 16 lowercase hex digits, the manifest's spelling.
std::string xxh64_hex(uint64_t hash);

// Creates a new file (O_EXCL: never follows or truncates something already
// there), buffers what is appended, and on finish() writes the rest, fsyncs
// and closes it. A writer destroyed before finish() closes its descriptor and
// leaves the partial file for the caller to remove with its directory.
class DurableFileWriter {
 public:
  explicit DurableFileWriter(std::string path);
  ~DurableFileWriter();
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  void append(const void* data, size_t size);
  void finish();  // REQUIRES: called once

  uint64_t bytes() const { return bytes_; }
  uint64_t xxh64() const;  // of everything appended

 private:
  void flush_buffer();

  std::string path_;
  int fd_ = -1;
  std::vector<unsigned char> buffer_;
  size_t buffered_ = 0;
  uint64_t bytes_ = 0;
  void* hash_state_ = nullptr;  // XXH64_state_t*, kept out of this header
};

// Length and XXH64 of a whole file, read in chunks.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};
FileDigest digest_file(const std::string& path);

// The whole file, read into memory.
std::string read_file_bytes(const std::string& path);

// fsync of a directory, so renames and creations inside it survive a power
// cut. Filesystems that cannot fsync directories (EINVAL) are accepted.
void fsync_directory(const std::string& dir);

void make_directory(const std::string& path);
void rename_path(const std::string& from, const std::string& to);
// Removes `path` and everything below it; a missing path is not an error.
void remove_tree(const std::string& path);
bool is_directory(const std::string& path);
bool path_exists(const std::string& path);
// Names of the entries of `dir` (no "." or "..").
std::vector<std::string> list_directory(const std::string& dir);

}  // namespace gradmesh::checkpoint
