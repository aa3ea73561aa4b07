#include "gradmesh/train/run_plan.h"

#include <algorithm>
#include <filesystem>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/train/run_dir.h"

namespace gradmesh::train {
namespace {

namespace fs = std::filesystem;

// Run directories under `parent` that hold checkpoints, most recently written first.
std::vector<fs::path> runs_with_checkpoints(const std::string& parent) {
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(parent, ec)) {
    const fs::path checkpoints = entry.path() / "checkpoints";
    std::error_code ignored;
    if (!fs::is_directory(checkpoints, ignored)) continue;
    const fs::file_time_type when = fs::last_write_time(checkpoints, ignored);
    if (!ignored) found.emplace_back(when, entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& [when, path] : found) out.push_back(path);
  return out;
}

std::string step_text(const checkpoint::LoadedCheckpoint& c) {
  return c.path + " (step " + std::to_string(c.trainer.step) + ", epoch " + std::to_string(c.trainer.epoch + 1) +
         ", written at world size " + std::to_string(c.trainer.world_size) + ")";
}

void note_skipped(RunPlan& plan) {
  if (!plan.checkpoint) return;
  for (const std::string& why : plan.checkpoint->skipped) plan.notes.push_back("skipped checkpoint " + why);
}

// --resume auto without a run id: the newest run whose checkpoint belongs to this config.
void find_run_to_continue(const Config& config, RunPlan& plan) {
  const std::string hash = training_config_hash(config);
  for (const fs::path& run : runs_with_checkpoints(config.output.dir)) {
    std::optional<checkpoint::LoadedCheckpoint> c;
    try {
      c = checkpoint::load_latest(checkpoints_dir_of(config, run.string()));
    } catch (const Error& e) {
      plan.notes.push_back("not continuing " + run.string() + ": " + e.what());
      continue;
    }
    if (!c || c->trainer.config_hash != hash) continue;
    plan.id = run.filename().string();
    plan.checkpoint = std::move(c);
    return;
  }
}

}  // namespace

bool is_warning_note(const std::string& note) {
  return note.starts_with("warning: ") || note.starts_with("skipped checkpoint ") || note.starts_with("not continuing ");
}

std::string checkpoints_dir_of(const Config& config, const std::string& run_dir) {
  return config.checkpoint.dir.empty() ? (fs::path(run_dir) / "checkpoints").string() : config.checkpoint.dir;
}

RunPlan plan_run(const Config& config, const RunOptions& options) {
  RunPlan plan;
  plan.parent = config.output.dir;
  plan.id = config.output.run_id.empty() ? env_string("GRADMESH_RUN_ID") : config.output.run_id;
  const bool is_path = !options.resume.empty() && options.resume != "auto";
  const bool automatic = options.resume == "auto" || options.generation > 0 || options.replacement;
  if (is_path) {
    plan.checkpoint = checkpoint::load_checkpoint(options.resume);
    plan.reuse = !plan.id.empty();
  } else if (automatic) {
    plan.reuse = true;
    if (plan.id.empty() && config.checkpoint.dir.empty()) find_run_to_continue(config, plan);
    if (!plan.checkpoint && !plan.id.empty())
      plan.checkpoint = checkpoint::load_latest(checkpoints_dir_of(config, (fs::path(plan.parent) / plan.id).string()));
    if (!plan.checkpoint && plan.id.empty() && !config.checkpoint.dir.empty())
      plan.checkpoint = checkpoint::load_latest(config.checkpoint.dir);
  }
  if (plan.id.empty()) plan.id = new_run_id();
  plan.checkpoints_dir = checkpoints_dir_of(config, (fs::path(plan.parent) / plan.id).string());
  note_skipped(plan);
  if (plan.checkpoint) {
    plan.notes.push_back("resuming from " + step_text(*plan.checkpoint));
    if (plan.checkpoint->trainer.config_hash != training_config_hash(config))
      plan.notes.push_back("warning: the checkpoint was written with a different training config (hash " +
                           plan.checkpoint->trainer.config_hash + ", this config " + training_config_hash(config) +
                           "); the run will not match one that never stopped");
  } else if (automatic) {
    plan.notes.push_back("no checkpoint to resume from in " + plan.checkpoints_dir + "; starting at step 0");
  }
  return plan;
}

}  // namespace gradmesh::train
