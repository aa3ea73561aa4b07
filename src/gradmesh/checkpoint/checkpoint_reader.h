// Finding and loading checkpoints that CheckpointWriter committed.
//
// Nothing on disk is trusted without verification: a checkpoint counts only
// if its manifest.json parses and every file it lists exists with the
// recorded length and xxh64 (each file is read fully and hashed), and its
// trainer.json parses. `latest` is only a hint for people; the loader scans
// the step-<N> directories, newest step first, and falls back to older ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/checkpoint/trainer_state.h"

namespace gradmesh::checkpoint {

struct LoadedCheckpoint {
  std::string path;                  // the step-<N> directory
  int64_t step = 0;
  std::vector<std::string> skipped;  // one line per newer checkpoint rejected: "<dir>: <why>"
  TrainerState trainer;
  Manifest manifest;                 // as verified

  // A file of this checkpoint, read again and checked against the manifest's
  // length and xxh64 before it is parsed, so what is returned is exactly what
  // was verified. A name the manifest does not list, or a file changed since,
  // is Error(kFormat) naming the file.
  SafetensorsFile read_tensor_file(const std::string& name) const;
  std::string read_text_file(const std::string& name) const;
};

// The files of the manifest's shard set `of` ("model", "optimizer") in
// index order; empty when the checkpoint has none. Error(kFormat) naming the
// checkpoint when shards of different counts are mixed or one is missing.
std::vector<std::string> shard_set(const LoadedCheckpoint& checkpoint, const std::string& of);

// Newest step-<N> under `checkpoints_dir` that verifies, listing in `skipped`
// why each newer one did not. std::nullopt when the directory does not exist
// or has no step-<N> at all; Error(kFormat) listing every reason when some
// exist but none verifies; Error(kIo) when the directory cannot be listed.
std::optional<LoadedCheckpoint> load_latest(const std::string& checkpoints_dir);

// PATH may be a step-<N> directory (or any directory holding manifest.json),
// which must verify (Error(kFormat) naming the file and the problem
// otherwise); a checkpoints directory; or a run directory containing
// checkpoints/. The latter two go through load_latest; finding no checkpoint
// there, or a PATH that does not exist, is Error(kIo) naming the path.
LoadedCheckpoint load_checkpoint(const std::string& path);

// Verifies one step directory; Error(kFormat) "<dir>: <file>: <problem>".
LoadedCheckpoint verify_checkpoint(const std::string& step_dir);

// A step directory another process has just verified (rank 0 at resume):
// reads manifest.json and trainer.json only, so N ranks do not each hash
// every file. Nothing goes unchecked: read_tensor_file checks each file it
// reads against the manifest. Error(kFormat) as verify_checkpoint's for the
// two files it reads.
LoadedCheckpoint reopen_checkpoint(const std::string& step_dir);

// The step-<N> directories of `checkpoints_dir` (full paths), newest step
// first; empty when it does not exist.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// Whether `path` is a step directory rather than a directory of them: named
// step-<N> or holding a manifest.json.
bool is_step_directory(const std::string& path);

// For `gradmesh inspect`: step, world size, each file with its bytes and
// "checksum ok" / "CHECKSUM MISMATCH" (or why it could not be checked),
// trainer.json's fields, and the tensors of each safetensors file.
// *all_verified says whether every file matched. A missing or malformed
// manifest is Error(kFormat): there is nothing to list.
std::string describe_checkpoint(const std::string& step_dir, bool* all_verified);

}  // namespace gradmesh::checkpoint
