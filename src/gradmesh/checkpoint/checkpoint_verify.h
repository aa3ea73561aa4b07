// Checking a step directory's files against its manifest; shared by the
// loader (which rejects at the first problem) and by describe_checkpoint
// (which lists every file's state). Internal to checkpoint/.
#pragma once

#include <string>

#include "gradmesh/checkpoint/manifest.h"

namespace gradmesh::checkpoint {

struct FileCheck {
  bool ok = false;
  std::string detail;  // when !ok: "missing", "length mismatch: ...", "checksum mismatch: ..."
};

// Reads `dir`/file.path fully and compares its length and xxh64.
FileCheck check_file(const std::string& dir, const ManifestFile& file);

// `dir`/manifest.json parsed; Error(kFormat) "<dir>: manifest.json ..." if
// it is missing, unreadable or malformed.
Manifest read_manifest(const std::string& dir);

// The bytes of `name`, which `manifest` must list, after checking them
// against its length and xxh64; Error(kFormat) "<dir>: <name>: ..." otherwise.
std::string read_verified_file(const std::string& dir, const Manifest& manifest, const std::string& name);

}  // namespace gradmesh::checkpoint
