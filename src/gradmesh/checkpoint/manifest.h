// manifest.json: the list of a checkpoint's files with their lengths and
// checksums, written last so that its presence means the rest is complete.
//
//   {"format": "gradmesh-checkpoint", "version": 1, "step": 1200,
//    "world_size": 4, "created_unix": 1764600000,
//    "layout": {"dp": 2, "pp": 2, "tp": 1, "zero": 0},   (split runs only)
//    "files": [{"path": "model.safetensors", "bytes": 1234, "xxh64": "0123456789abcdef", "rank": 0},
//              {"path": "optimizer.shard-00001-of-00004.safetensors", "bytes": 99,
//               "xxh64": "...", "rank": 0, "shard": {"index": 1, "count": 4, "of": "optimizer"}}, ...]}
//
// See docs/checkpoint.md for the whole on-disk format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::checkpoint {

inline constexpr const char* kManifestFormat = "gradmesh-checkpoint";
inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFileName = "manifest.json";
inline constexpr const char* kTrainerStateFileName = "trainer.json";
inline constexpr const char* kLatestFileName = "latest";

// One file of state split across ranks: "<of>.shard-<index>-of-<count>.safetensors",
// index counted from 1 as in Hugging Face's sharded checkpoints, five digits or more.
struct ShardInfo {
  int index = 0;  // 1..count
  int count = 0;
  std::string of;  // "optimizer"
};

struct ManifestFile {
  std::string path;   // relative to the step directory; a plain file name
  uint64_t bytes = 0;
  std::string xxh64;  // 16 lowercase hex digits, seed 0
  int rank = 0;       // the rank that wrote it
  std::optional<ShardInfo> shard;
};

// How the saving run was laid out (parallel.mesh and ZeRO stage): written by
// split runs, whose shards are pieces of the whole model; informational,
// since every layout can load every checkpoint.
struct SavedLayout {
  int dp = 1, pp = 1, tp = 1, zero = 0;
  bool operator==(const SavedLayout&) const = default;
};

struct Manifest {
  int64_t step = 0;
  int world_size = 1;
  std::optional<SavedLayout> layout;  // "layout": {"dp": 2, "pp": 2, "tp": 1, "zero": 1}
  int64_t created_unix = 0;
  std::vector<ManifestFile> files;

  const ManifestFile* find(const std::string& path) const;  // nullptr if absent
};

std::string manifest_json(const Manifest& manifest);
// Strict: any missing, ill-typed or out-of-range field, an unknown format or
// version, a file path that is not a plain file name, or a path listed twice
// is Error(kFormat) naming `source` and the field.
Manifest parse_manifest(const std::string& text, const std::string& source);

// The file name of shard `index` (1-based) of `count` of `of`:
// shard_file_name("optimizer", 1, 4) == "optimizer.shard-00001-of-00004.safetensors".
std::string shard_file_name(const std::string& of, int index, int count);
// The inverse; nullopt for a name that is not a shard file name.
std::optional<ShardInfo> parse_shard_file_name(const std::string& name);

// A name a checkpoint file may have: non-empty, no '/', no NUL, not starting with '.'.
bool is_plain_file_name(const std::string& name);

// "step-<N>", N decimal without padding.
std::string step_dir_name(int64_t step);
// The N of "step-<N>"; nullopt for anything else ("step-007", "step-5.tmp", "step-x").
std::optional<int64_t> parse_step_dir_name(const std::string& name);

}  // namespace gradmesh::checkpoint
