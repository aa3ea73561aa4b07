#include "gradmesh/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <map>
#include <utility>

#include "gradmesh/checkpoint/checkpoint_io.h"
#include "gradmesh/checkpoint/checkpoint_verify.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::vector<std::string> shard_set(const LoadedCheckpoint& checkpoint, const std::string& of) {
  std::map<int, std::string> shards;
  int count = 0;
  for (const ManifestFile& file : checkpoint.manifest.files) {
    if (!file.shard || file.shard->of != of) continue;
    if (count != 0 && file.shard->count != count)
      throw_error(ErrorKind::kFormat, checkpoint.path,
                  of + " shards of " + std::to_string(count) + " and of " + std::to_string(file.shard->count) +
                      " files are mixed");
    count = file.shard->count;
    shards[file.shard->index] = file.path;
  }
  std::vector<std::string> names;
  for (int index = 1; index <= count; ++index) {
    if (!shards.count(index))
      throw_error(ErrorKind::kFormat, checkpoint.path, of + " shard " + shard_file_name(of, index, count) + " is missing");
    names.push_back(shards[index]);
  }
  return names;
}

SafetensorsFile LoadedCheckpoint::read_tensor_file(const std::string& name) const {
  const std::string bytes = read_verified_file(path, manifest, name);
  return parse_safetensors(path + "/" + name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::string LoadedCheckpoint::read_text_file(const std::string& name) const {
  return read_verified_file(path, manifest, name);
}

LoadedCheckpoint verify_checkpoint(const std::string& step_dir) {
  const std::string dir = without_trailing_slashes(step_dir);
  LoadedCheckpoint loaded;
  loaded.path = dir;
  loaded.manifest = read_manifest(dir);
  loaded.step = loaded.manifest.step;
  if (const auto named_step = parse_step_dir_name(base_name(dir)); named_step && *named_step != loaded.step) {
    throw_error(ErrorKind::kFormat, dir,
                "manifest.json records step " + std::to_string(loaded.step) + " but the directory is " + base_name(dir));
  }
  for (const ManifestFile& file : loaded.manifest.files) {
    const FileCheck check = check_file(dir, file);
    if (!check.ok) throw_error(ErrorKind::kFormat, dir, file.path + ": " + check.detail);
  }
  if (loaded.manifest.find(kTrainerStateFileName) == nullptr) {
    throw_error(ErrorKind::kFormat, dir, std::string("manifest.json lists no ") + kTrainerStateFileName);
  }
  loaded.trainer = parse_trainer_state(loaded.read_text_file(kTrainerStateFileName), dir + ": " + kTrainerStateFileName);
  if (loaded.trainer.step != loaded.step) {
    throw_error(ErrorKind::kFormat, dir,
                std::string(kTrainerStateFileName) + ": step " + std::to_string(loaded.trainer.step) +
                    " differs from the manifest's step " + std::to_string(loaded.step));
  }
  return loaded;
}

LoadedCheckpoint reopen_checkpoint(const std::string& step_dir) {
  LoadedCheckpoint loaded;
  loaded.path = without_trailing_slashes(step_dir);
  loaded.manifest = read_manifest(loaded.path);
  loaded.step = loaded.manifest.step;
  const std::string source = loaded.path + ": " + kTrainerStateFileName;
  if (loaded.manifest.find(kTrainerStateFileName) == nullptr)
    throw_error(ErrorKind::kFormat, loaded.path, std::string("manifest.json lists no ") + kTrainerStateFileName);
  loaded.trainer = parse_trainer_state(loaded.read_text_file(kTrainerStateFileName), source);
  return loaded;
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  const std::string dir = without_trailing_slashes(checkpoints_dir);
  if (!is_directory(dir)) return {};
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : list_directory(dir)) {
    const auto step = parse_step_dir_name(name);
    if (step && is_directory(dir + "/" + name)) found.emplace_back(*step, dir + "/" + name);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> paths;
  for (auto& entry : found) paths.push_back(std::move(entry.second));
  return paths;
}

std::optional<LoadedCheckpoint> load_latest(const std::string& checkpoints_dir) {
  const std::string dir = without_trailing_slashes(checkpoints_dir);
  if (!path_exists(dir)) return std::nullopt;
  if (!is_directory(dir)) throw_error(ErrorKind::kIo, dir, "is not a directory; expected a checkpoints directory");
  const std::vector<std::string> candidates = list_checkpoints(dir);
  if (candidates.empty()) return std::nullopt;
  std::vector<std::string> skipped;
  for (const std::string& candidate : candidates) {
    try {
      LoadedCheckpoint loaded = verify_checkpoint(candidate);
      loaded.skipped = std::move(skipped);
      return loaded;
    } catch (const Error& e) {
      skipped.push_back(e.what());
    }
  }
  std::string reasons;
  for (const std::string& line : skipped) reasons += "\n  " + line;
  throw_error(ErrorKind::kFormat, dir,
              "none of its " + std::to_string(candidates.size()) + " checkpoints verifies:" + reasons);
}

bool is_step_directory(const std::string& path) {
  const std::string dir = without_trailing_slashes(path);
  return parse_step_dir_name(base_name(dir)).has_value() || path_exists(dir + "/" + kManifestFileName);
}

LoadedCheckpoint load_checkpoint(const std::string& path) {
  const std::string dir = without_trailing_slashes(path);
  constexpr const char* kExpected = "expected a step-<N> directory, a checkpoints directory or a run directory";
  if (!path_exists(dir)) throw_error(ErrorKind::kIo, dir, std::string("does not exist; ") + kExpected);
  if (!is_directory(dir)) throw_error(ErrorKind::kIo, dir, std::string("is not a directory; ") + kExpected);
  if (is_step_directory(dir)) return verify_checkpoint(dir);
  const std::string checkpoints = is_directory(dir + "/checkpoints") ? dir + "/checkpoints" : dir;
  std::optional<LoadedCheckpoint> loaded = load_latest(checkpoints);
  if (!loaded) {
    throw_error(ErrorKind::kIo, dir, "holds no checkpoint (no step-<N> directory in '" + checkpoints + "')");
  }
  return std::move(*loaded);
}

}  // namespace gradmesh::checkpoint
