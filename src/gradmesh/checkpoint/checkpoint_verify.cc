#include "gradmesh/checkpoint/checkpoint_verify.h"

#include <xxhash.h>

#include "gradmesh/checkpoint/checkpoint_io.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

// Compares what was read with what the manifest recorded.
FileCheck compare(const ManifestFile& file, uint64_t bytes, uint64_t hash) {
  if (bytes != file.bytes) {
    return {false, "length mismatch: " + std::to_string(bytes) + " bytes on disk, the manifest records " +
                       std::to_string(file.bytes) + (bytes < file.bytes ? " (truncated)" : "")};
  }
  if (xxh64_hex(hash) != file.xxh64) {
    return {false, "checksum mismatch: xxh64 " + xxh64_hex(hash) + " on disk, the manifest records " + file.xxh64 +
                       " (the file is corrupt)"};
  }
  return {true, ""};
}

}  // namespace

FileCheck check_file(const std::string& dir, const ManifestFile& file) {
  const std::string path = dir + "/" + file.path;
  if (!path_exists(path)) return {false, "missing (listed in manifest.json)"};
  try {
    const FileDigest digest = digest_file(path);
    return compare(file, digest.bytes, digest.xxh64);
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFileName;
  if (!path_exists(path)) {
    throw_error(ErrorKind::kFormat, dir,
                std::string(kManifestFileName) + " is missing (the save did not finish, or this is no checkpoint)");
  }
  std::string text;
  try {
    text = read_file_bytes(path);
  } catch (const Error& e) {
    throw_error(ErrorKind::kFormat, dir, std::string(kManifestFileName) + ": " + e.what());
  }
  return parse_manifest(text, dir + ": " + kManifestFileName);
}

std::string read_verified_file(const std::string& dir, const Manifest& manifest, const std::string& name) {
  const ManifestFile* file = manifest.find(name);
  if (file == nullptr) {
    std::string listed;
    for (const ManifestFile& entry : manifest.files) listed += (listed.empty() ? "" : ", ") + entry.path;
    throw_error(ErrorKind::kFormat, dir, name + ": not in this checkpoint (manifest.json lists: " + listed + ")");
  }
  std::string bytes;
  try {
    bytes = read_file_bytes(dir + "/" + name);
  } catch (const Error& e) {
    throw_error(ErrorKind::kFormat, dir, name + ": " + e.what());
  }
  const FileCheck check = compare(*file, bytes.size(), XXH64(bytes.data(), bytes.size(), 0));
  if (!check.ok) throw_error(ErrorKind::kFormat, dir, name + ": " + check.detail);
  return bytes;
}

}  // namespace gradmesh::checkpoint
