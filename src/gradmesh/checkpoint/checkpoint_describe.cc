// describe_checkpoint (declared in checkpoint_reader.h): the listing behind
// `gradmesh inspect <checkpoint directory>`.
#include <algorithm>
#include <ctime>

#include "gradmesh/checkpoint/checkpoint_io.h"
#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/checkpoint_verify.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

std::string utc_time(int64_t unix_seconds) {
  const auto seconds = static_cast<std::time_t>(unix_seconds);
  std::tm parts{};
  if (gmtime_r(&seconds, &parts) == nullptr) return "?";
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &parts);
  return text;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string describe_files(const std::string& dir, const Manifest& manifest, bool* all_verified) {
  size_t width = 0, bytes_width = 0;
  for (const ManifestFile& file : manifest.files) {
    width = std::max(width, file.path.size());
    bytes_width = std::max(bytes_width, std::to_string(file.bytes).size());
  }
  std::string out = "files:\n";
  for (const ManifestFile& file : manifest.files) {
    const FileCheck check = check_file(dir, file);
    if (!check.ok) *all_verified = false;
    const std::string bytes = std::to_string(file.bytes);
    std::string line = "  " + file.path + std::string(width - file.path.size(), ' ') + "  " +
                       std::string(bytes_width - bytes.size(), ' ') + bytes + " bytes  rank " + std::to_string(file.rank);
    if (file.shard) {
      line += "  shard " + std::to_string(file.shard->index) + "/" + std::to_string(file.shard->count) + " of " +
              file.shard->of;
    }
    std::string detail = check.detail;
    const std::string kRepeated = "checksum mismatch: ";
    if (detail.rfind(kRepeated, 0) == 0) detail.erase(0, kRepeated.size());
    line += check.ok ? "  checksum ok" : "  CHECKSUM MISMATCH: " + detail;
    out += line + "\n";
  }
  return out;
}

std::string describe_trainer(const std::string& dir, const Manifest& manifest, bool* all_verified) {
  if (manifest.find(kTrainerStateFileName) == nullptr) {
    *all_verified = false;
    return std::string(kTrainerStateFileName) + ": NOT IN THE MANIFEST (the checkpoint cannot be resumed)\n";
  }
  try {
    const TrainerState s =
        parse_trainer_state(read_verified_file(dir, manifest, kTrainerStateFileName), dir + ": " + kTrainerStateFileName);
    std::string out = std::string(kTrainerStateFileName) + ":\n";
    out += "  step: " + std::to_string(s.step) + "\n  epoch: " + std::to_string(s.epoch) +
           "\n  step_in_epoch: " + std::to_string(s.step_in_epoch) +
           "\n  epoch_position: " + std::to_string(s.epoch_position) + "\n  seed: " + std::to_string(s.seed) +
           "\n  rng_step: " + std::to_string(s.rng_step) + "\n  config_hash: " + s.config_hash +
           "\n  world_size: " + std::to_string(s.world_size) + "\n  generation: " + std::to_string(s.generation) +
           "\n  optimizer: " + s.optimizer + "\n  zero_stage: " + std::to_string(s.zero_stage) + "\n";
    if (s.step != manifest.step) {
      *all_verified = false;
      out += "  STEP DIFFERS from the manifest's step " + std::to_string(manifest.step) + "\n";
    }
    return out;
  } catch (const Error& e) {
    *all_verified = false;
    return std::string(kTrainerStateFileName) + ": UNREADABLE: " + e.what() + "\n";
  }
}

}  // namespace

std::string describe_checkpoint(const std::string& step_dir, bool* all_verified) {
  std::string dir = step_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  bool verified = true;
  const Manifest manifest = read_manifest(dir);
  std::string out = "checkpoint: " + dir + "\n";
  out += "step: " + std::to_string(manifest.step) + "\n";
  out += "world size: " + std::to_string(manifest.world_size) + "\n";
  if (const std::optional<SavedLayout>& l = manifest.layout)
    out += "layout: dp " + std::to_string(l->dp) + " x pp " + std::to_string(l->pp) + " x tp " + std::to_string(l->tp) +
           ", ZeRO stage " + std::to_string(l->zero) + " (weights in pieces; gradmesh export joins them)\n";
  out += "created: " + utc_time(manifest.created_unix) + "\n";
  out += describe_files(dir, manifest, &verified);
  out += describe_trainer(dir, manifest, &verified);
  for (const ManifestFile& file : manifest.files) {
    if (!ends_with(file.path, ".safetensors")) continue;
    out += "\n" + file.path + ":\n";
    try {
      out += describe_safetensors(read_safetensors(dir + "/" + file.path));
    } catch (const Error& e) {
      out += std::string("  cannot read: ") + e.what() + "\n";
    }
  }
  if (all_verified != nullptr) *all_verified = verified;
  return out;
}

}  // namespace gradmesh::checkpoint
