// CheckpointWriter: writes a Snapshot as <dir>/step-<N>/ with a commit
// protocol that a crash, a full disk or an I/O error at any moment cannot
// turn into a torn checkpoint (docs/checkpoint.md):
//
//   1. remove a leftover step-<N>.tmp/, create it;
//   2. write every file into it, fsync each;
//   3. write manifest.json (lengths and xxh64 of all files), fsync it and the directory;
//   4. rename step-<N>.tmp -> step-<N> (an existing step-<N> is first moved to
//      step-<N>.old, removed after), fsync <dir>;
//   5. replace <dir>/latest ("step-<N>\n") atomically;
//   6. delete committed checkpoints beyond the newest keep_last.
//
// A step-<N> directory therefore either verifies against its manifest or is
// absent; readers (checkpoint_reader.h) never trust anything else.
//
// Sharded state (ZeRO: every rank holds its own optimizer shard) is written
// by every rank, committed by one. Each other rank's writer (committer =
// false) saves its part: the files go to <dir>/step-<N>.parts/, each fsynced,
// then a receipt <file>.manifest.json (a one-file manifest: length and xxh64)
// is written atomically, or <file>.error with the reason. The committer's
// save writes its own files into step-<N>.tmp/, waits (up to
// parts_timeout_s) for the receipt of every name in parts_from_others,
// renames those files into step-<N>.tmp/ (same directory tree, so no copy),
// lists them in the manifest with their rank and shard, and commits as
// above. A part that does not arrive, or arrives with an error, fails the
// save like any I/O error. This needs the checkpoints directory to be one
// shared file system for all ranks.
// One writer per checkpoints directory at a time; not thread-safe (the async
// writer gives it one thread).
#pragma once

#include <cstdint>
#include <string>

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/checkpoint/snapshot.h"

namespace gradmesh::checkpoint {

struct SaveResult {
  bool ok = false;
  std::string path;   // the step-<N> directory (set even on failure)
  std::string error;  // on failure: what failed, naming the path and the errno text
  int64_t bytes = 0;  // bytes written, manifest included
  double seconds = 0;
};

struct CheckpointOptions {
  std::string dir;    // the checkpoints directory, e.g. runs/<id>/checkpoints
  int keep_last = 3;  // committed checkpoints kept; 0 keeps all
  // false: this writer only saves parts (snapshots with is_part) for the
  // committer; it neither cleans up nor prunes the directory.
  bool committer = true;
  double parts_timeout_s = 600;  // how long the committer waits for other ranks' parts
};

// The protocol points GRADMESH_CHECKPOINT_PAUSE can stop right after.
enum class PausePoint { kNone, kFiles, kManifest, kRename, kLatest };

class CheckpointWriter {
 public:
  // Creates `dir` with its parents (Error(kIo) if impossible), removes what
  // crashed saves left (step-*.tmp, latest.tmp.*; a step-<N>.old whose
  // step-<N> is missing is renamed back), and reads
  // GRADMESH_CHECKPOINT_PAUSE (Error(kConfig) if malformed). keep_last < 0
  // is Error(kConfig).
  explicit CheckpointWriter(CheckpointOptions options);

  // Runs the commit protocol, or (snapshot.is_part) saves the part. Never
  // throws: every failure (including an invalid snapshot: duplicate or
  // non-plain file names) is a SaveResult with ok false, after which
  // step-<N>.tmp is gone and every earlier checkpoint and `latest` are untouched.
  SaveResult save(const Snapshot& snapshot);

  const CheckpointOptions& options() const { return options_; }

 private:
  void commit(const Snapshot& snapshot, SaveResult* result);
  void save_part(const Snapshot& snapshot, SaveResult* result);
  // Waits for the other ranks' parts and moves them into `tmp`; their manifest entries.
  std::vector<ManifestFile> collect_parts(const Snapshot& snapshot, const std::string& tmp) const;
  void pause_after(PausePoint point) const;
  void prune(int64_t just_saved) const;

  CheckpointOptions options_;
  PausePoint pause_point_ = PausePoint::kNone;
  double pause_seconds_ = 0;
};

}  // namespace gradmesh::checkpoint
