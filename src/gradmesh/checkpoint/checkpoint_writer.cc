#include "gradmesh/checkpoint/checkpoint_writer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>
#include <thread>

#include "gradmesh/checkpoint/checkpoint_io.h"
#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/private_files.h"

namespace gradmesh::checkpoint {
namespace {

constexpr const char* kPauseVariable = "GRADMESH_CHECKPOINT_PAUSE";
constexpr double kMaxPauseSeconds = 3600;

struct NamedPausePoint {
  const char* name;
  PausePoint point;
};
constexpr NamedPausePoint kPausePoints[] = {{"files", PausePoint::kFiles},
                                            {"manifest", PausePoint::kManifest},
                                            {"rename", PausePoint::kRename},
                                            {"latest", PausePoint::kLatest}};

const char* pause_point_name(PausePoint point) {
  for (const NamedPausePoint& named : kPausePoints)
    if (named.point == point) return named.name;
  return "none";
}

// GRADMESH_CHECKPOINT_PAUSE=<point>:<seconds>; unset or empty means no pause.
void read_pause_knob(PausePoint* point, double* seconds) {
  const std::string value = env_string(kPauseVariable);
  if (value.empty()) return;
  const std::string what = std::string("environment variable ") + kPauseVariable;
  const size_t colon = value.find(':');
  const std::string name = value.substr(0, colon);
  const auto named = std::find_if(std::begin(kPausePoints), std::end(kPausePoints),
                                  [&](const NamedPausePoint& p) { return name == p.name; });
  if (colon == std::string::npos || named == std::end(kPausePoints)) {
    throw_error(ErrorKind::kConfig, what,
                "expected <point>:<seconds> with point files, manifest, rename or latest (e.g. manifest:30), got '" +
                    value + "'");
  }
  *seconds = parse_double(value.substr(colon + 1), what + " (seconds)", 0, kMaxPauseSeconds, ErrorKind::kConfig);
  *point = named->point;
}

void check_snapshot(const Snapshot& snapshot) {
  if (snapshot.step < 0) throw Error(ErrorKind::kInternal, "snapshot step " + std::to_string(snapshot.step) + " is negative");
  if (snapshot.world_size < 1) {
    throw Error(ErrorKind::kInternal, "snapshot world_size " + std::to_string(snapshot.world_size) + " is below 1");
  }
  std::set<std::string> names = {kManifestFileName};
  auto check_name = [&](const std::string& name) {
    if (!is_plain_file_name(name)) {
      throw Error(ErrorKind::kInternal, "snapshot file name '" + name + "' is not a plain file name");
    }
    if (!names.insert(name).second) {
      throw Error(ErrorKind::kInternal, "snapshot file name '" + name + "' is used twice (or is reserved)");
    }
  };
  for (const TensorFile& file : snapshot.tensor_files) check_name(file.name);
  for (const auto& text : snapshot.text_files) check_name(text.first);
}

ManifestFile finish_file(DurableFileWriter* out, const std::string& name, int rank) {
  out->finish();
  ManifestFile entry;
  entry.path = name;
  entry.bytes = out->bytes();
  entry.xxh64 = xxh64_hex(out->xxh64());
  entry.rank = rank;
  entry.shard = parse_shard_file_name(name);
  return entry;
}

ManifestFile write_text_file(const std::string& dir, const std::string& name, const std::string& text, int rank) {
  DurableFileWriter out(dir + "/" + name);
  out.append(text.data(), text.size());
  return finish_file(&out, name, rank);
}

ManifestFile write_tensor_file(const std::string& dir, const TensorFile& file) {
  const std::string path = dir + "/" + file.name;
  DurableFileWriter out(path);
  encode_safetensors(path, file.tensors, file.metadata, DType::kF32,
                     [&out](const void* data, size_t size) { out.append(data, size); });
  return finish_file(&out, file.name, file.rank);
}

// Where other ranks put their parts of step `step` (sharded state) for the committer.
std::string parts_dir(const std::string& dir, int64_t step) { return dir + "/" + step_dir_name(step) + ".parts"; }
constexpr const char* kReceiptSuffix = ".manifest.json";
constexpr const char* kFailureSuffix = ".error";
constexpr auto kPartPoll = std::chrono::milliseconds(20);

// Committed step-<N> directories of `dir`, newest first.
std::vector<int64_t> committed_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const std::string& name : list_directory(dir))
    if (const auto step = parse_step_dir_name(name); step && is_directory(dir + "/" + name)) steps.push_back(*step);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// What crashed saves leave: step-<N>.tmp (never committed), step-<N>.old
// (a replaced checkpoint; put back if the crash came before its successor's
// rename), step-<N>.parts (other ranks' parts of a save that did not commit)
// and write_file_atomically's latest.tmp.* files.
void remove_crash_leftovers(const std::string& dir) {
  for (const std::string& name : list_directory(dir)) {
    const std::string path = dir + "/" + name;
    const auto ends_with = [&](const std::string& suffix) {
      return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if ((ends_with(".tmp") && parse_step_dir_name(name.substr(0, name.size() - 4))) ||
        (ends_with(".parts") && parse_step_dir_name(name.substr(0, name.size() - 6)))) {
      log_warn("checkpoint: removing '" + path + "', left by a save that did not finish");
      remove_tree(path);
    } else if (ends_with(".old") && parse_step_dir_name(name.substr(0, name.size() - 4))) {
      const std::string committed = path.substr(0, path.size() - 4);
      if (path_exists(committed)) {
        remove_tree(path);
      } else {
        rename_path(path, committed);
        fsync_directory(dir);
      }
    } else if (name.rfind(std::string(kLatestFileName) + ".tmp.", 0) == 0) {
      remove_tree(path);
    }
  }
}

}  // namespace

CheckpointWriter::CheckpointWriter(CheckpointOptions options) : options_(std::move(options)) {
  if (options_.dir.empty()) throw_error(ErrorKind::kConfig, "checkpoint directory", "is empty; expected a path");
  if (options_.keep_last < 0) {
    throw_error(ErrorKind::kConfig, "checkpoint keep_last", std::to_string(options_.keep_last) + " is negative; expected 0 (keep all) or more");
  }
  read_pause_knob(&pause_point_, &pause_seconds_);
  std::error_code error;
  create_private_directories(options_.dir, error);
  if (error || !is_directory(options_.dir)) {
    throw_error(ErrorKind::kIo, options_.dir,
                "cannot create the checkpoint directory: " + (error ? error.message() : std::string("not a directory")));
  }
  // Only the committer tidies: another rank's writer could remove what the committer is writing.
  if (options_.committer) remove_crash_leftovers(options_.dir);
}

void CheckpointWriter::pause_after(PausePoint point) const {
  if (point != pause_point_) return;
  // Printed whatever GRADMESH_DEBUG says: a test waits for this line to know
  // the save has reached the point where it wants to kill the process.
  std::fprintf(stderr, "gradmesh: %s: paused after '%s' for %g s\n", kPauseVariable, pause_point_name(point),
               pause_seconds_);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::duration<double>(pause_seconds_));
}

SaveResult CheckpointWriter::save(const Snapshot& snapshot) {
  const auto start = std::chrono::steady_clock::now();
  SaveResult result;
  result.path = options_.dir + "/" + step_dir_name(snapshot.step);
  const std::string tmp = result.path + ".tmp";
  try {
    if (snapshot.is_part) save_part(snapshot, &result);
    else commit(snapshot, &result);
    result.ok = true;
  } catch (const std::exception& e) {
    result.error = e.what();
  } catch (...) {
    result.error = "unknown exception while saving";
  }
  if (!result.ok && !snapshot.is_part) {
    std::error_code ignored;
    std::filesystem::remove_all(tmp, ignored);  // the one thing a failed save may leave
    // Parts that arrive after this are removed when the next run's committer starts.
    if (!snapshot.parts_from_others.empty()) std::filesystem::remove_all(parts_dir(options_.dir, snapshot.step), ignored);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.ok && !snapshot.is_part && options_.committer) {
    try {
      prune(snapshot.step);
    } catch (const std::exception& e) {
      // The new checkpoint is committed; old ones linger until the next save prunes them.
      log_warn(std::string("checkpoint: pruning old checkpoints failed: ") + e.what());
    }
  }
  return result;
}

void CheckpointWriter::commit(const Snapshot& snapshot, SaveResult* result) {
  check_snapshot(snapshot);
  const std::string& final_dir = result->path;
  const std::string tmp = final_dir + ".tmp";
  remove_tree(tmp);
  make_directory(tmp);

  Manifest manifest;
  manifest.step = snapshot.step;
  manifest.world_size = snapshot.world_size;
  manifest.layout = snapshot.layout;
  manifest.created_unix = static_cast<int64_t>(std::time(nullptr));
  for (const TensorFile& file : snapshot.tensor_files) manifest.files.push_back(write_tensor_file(tmp, file));
  for (const auto& [name, text] : snapshot.text_files) manifest.files.push_back(write_text_file(tmp, name, text, 0));
  for (ManifestFile& part : collect_parts(snapshot, tmp)) manifest.files.push_back(std::move(part));
  pause_after(PausePoint::kFiles);

  const ManifestFile written = write_text_file(tmp, kManifestFileName, manifest_json(manifest), 0);
  fsync_directory(tmp);
  for (const ManifestFile& file : manifest.files) result->bytes += static_cast<int64_t>(file.bytes);
  result->bytes += static_cast<int64_t>(written.bytes);
  pause_after(PausePoint::kManifest);

  // Replacing an existing step-<N> (a resumed run reaching the same step):
  // move it aside first so that at every moment one complete step-<N> or
  // step-<N>.old exists; the constructor puts a stranded .old back.
  const std::string old = final_dir + ".old";
  const bool replacing = path_exists(final_dir);
  if (replacing) {
    remove_tree(old);
    rename_path(final_dir, old);
  }
  try {
    rename_path(tmp, final_dir);
  } catch (...) {
    if (replacing) std::rename(old.c_str(), final_dir.c_str());
    throw;
  }
  fsync_directory(options_.dir);
  if (replacing) remove_tree(old);
  pause_after(PausePoint::kRename);

  try {
    write_file_atomically(options_.dir + "/" + kLatestFileName, step_dir_name(snapshot.step) + "\n");
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kIo, "'" + final_dir + "' is committed but '" + kLatestFileName +
                                    "' still names the previous checkpoint: " + e.what());
  }
  pause_after(PausePoint::kLatest);
}

void CheckpointWriter::save_part(const Snapshot& snapshot, SaveResult* result) {
  if (options_.committer || !snapshot.text_files.empty() || !snapshot.parts_from_others.empty())
    throw Error(ErrorKind::kInternal, "a part is tensor files only, saved by a writer that is not the committer");
  check_snapshot(snapshot);
  const std::string parts = parts_dir(options_.dir, snapshot.step);
  std::error_code error;
  create_private_directories(parts, error);
  if (error) throw_io_error("cannot create directory", parts, error.value());
  for (const TensorFile& file : snapshot.tensor_files) {
    const std::string base = parts + "/" + file.name;
    for (const char* suffix : {"", kReceiptSuffix, kFailureSuffix}) remove_tree(base + suffix);
    try {
      Manifest receipt;
      receipt.step = snapshot.step;
      receipt.world_size = snapshot.world_size;
      receipt.created_unix = static_cast<int64_t>(std::time(nullptr));
      receipt.files.push_back(write_tensor_file(parts, file));
      result->bytes += static_cast<int64_t>(receipt.files.back().bytes);
      write_file_atomically(base + kReceiptSuffix, manifest_json(receipt));
    } catch (const std::exception& e) {
      try {
        write_file_atomically(base + kFailureSuffix, std::string(e.what()));  // the committer stops waiting
      } catch (const std::exception&) {
        // The committer times out instead; this rank's own log says why.
      }
      throw;
    }
  }
}

std::vector<ManifestFile> CheckpointWriter::collect_parts(const Snapshot& snapshot, const std::string& tmp) const {
  std::vector<ManifestFile> collected;
  if (snapshot.parts_from_others.empty()) return collected;
  const std::string parts = parts_dir(options_.dir, snapshot.step);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.parts_timeout_s);
  for (const std::string& name : snapshot.parts_from_others) {
    const std::string base = parts + "/" + name;
    while (!path_exists(base + kReceiptSuffix)) {
      if (path_exists(base + kFailureSuffix))
        throw Error(ErrorKind::kIo, "the rank writing '" + name + "' failed: " + read_file_bytes(base + kFailureSuffix));
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(ErrorKind::kTimeout, "'" + name + "' of step " + std::to_string(snapshot.step) +
                                             " did not arrive in '" + parts + "' within " +
                                             std::to_string(options_.parts_timeout_s) +
                                             " s (its rank failed, or the directory is not shared by all ranks)");
      std::this_thread::sleep_for(kPartPoll);
    }
    const Manifest receipt = parse_manifest(read_file_bytes(base + kReceiptSuffix), base + kReceiptSuffix);
    if (receipt.step != snapshot.step || receipt.files.size() != 1 || receipt.files[0].path != name)
      throw Error(ErrorKind::kFormat, "'" + base + kReceiptSuffix + "' is not the receipt of '" + name + "' at step " +
                                          std::to_string(snapshot.step));
    rename_path(base, tmp + "/" + name);
    collected.push_back(receipt.files[0]);
  }
  remove_tree(parts);
  return collected;
}

void CheckpointWriter::prune(int64_t just_saved) const {
  if (options_.keep_last == 0) return;
  const std::vector<int64_t> steps = committed_steps(options_.dir);
  // The checkpoint just written is always kept, even when newer step numbers
  // exist (a run resumed from an older checkpoint).
  int kept = 1;
  for (int64_t step : steps) {
    if (step == just_saved) continue;
    if (kept < options_.keep_last) {
      ++kept;
      continue;
    }
    remove_tree(options_.dir + "/" + step_dir_name(step));
  }
}

}  // namespace gradmesh::checkpoint
