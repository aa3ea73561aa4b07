#include "gradmesh/checkpoint/trainer_state.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::checkpoint {
namespace {

using Json = nlohmann::json;

constexpr const char* kFields[] = {"format_version", "step",        "epoch",      "step_in_epoch",
                                   "epoch_position", "seed",        "rng_step",   "config_hash",
                                   "world_size",     "generation",  "optimizer",  "zero_stage",
                                   "samples",        "checkpoints_saved",         "checkpoints_failed"};

class FieldReader {
 public:
  FieldReader(const Json& root, const std::string& source) : root_(root), source_(source) {}

  const Json& field(const char* key) const {
    const auto it = root_.find(key);
    if (it == root_.end()) fail(key, "is missing");
    return *it;
  }

  int64_t integer(const char* key, int64_t min, int64_t max) const {
    const Json& value = field(key);
    const std::string expected = "an integer " + int_range_text(min, max);
    if (!value.is_number_integer()) fail(key, "is " + value.dump() + "; expected " + expected);
    // An unsigned JSON number above int64's range would wrap in get<int64_t>().
    const bool too_big = value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kInt64Max);
    if (too_big || value.get<int64_t>() < min || value.get<int64_t>() > max) {
      fail(key, "is " + value.dump() + "; expected " + expected);
    }
    return value.get<int64_t>();
  }

  uint64_t unsigned_integer(const char* key) const {
    const Json& value = field(key);
    if (!value.is_number_unsigned()) fail(key, "is " + value.dump() + "; expected an unsigned 64-bit integer");
    return value.get<uint64_t>();
  }

  std::string string(const char* key, bool allow_empty) const {
    const Json& value = field(key);
    if (!value.is_string()) fail(key, "is " + value.dump() + "; expected a string");
    if (!allow_empty && value.get_ref<const std::string&>().empty()) fail(key, "is empty; expected a name");
    return value.get<std::string>();
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw_error(ErrorKind::kFormat, source_, "field '" + key + "' " + what);
  }

 private:
  const Json& root_;
  const std::string& source_;
};

}  // namespace

std::string trainer_state_json(const TrainerState& state) {
  nlohmann::ordered_json root = {{"format_version", state.format_version},
                                       {"step", state.step},
                                       {"epoch", state.epoch},
                                       {"step_in_epoch", state.step_in_epoch},
                                       {"epoch_position", state.epoch_position},
                                       {"seed", state.seed},
                                       {"rng_step", state.rng_step},
                                       {"config_hash", state.config_hash},
                                       {"world_size", state.world_size},
                                       {"generation", state.generation},
                                       {"optimizer", state.optimizer},
                                       {"zero_stage", state.zero_stage},
                                       {"checkpoints_saved", state.checkpoints_saved},
                                       {"checkpoints_failed", state.checkpoints_failed}};
  if (state.samples >= 0) root["samples"] = state.samples;  // -1: not known (a state read from an older file)
  return root.dump(2) + "\n";
}

TrainerState parse_trainer_state(const std::string& text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    throw_error(ErrorKind::kFormat, source, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) {
    throw_error(ErrorKind::kFormat, source, std::string("is a JSON ") + root.type_name() + "; expected an object");
  }
  const FieldReader read(root, source);
  // The version first: a newer file's other fields may mean something else.
  read.integer("format_version", kTrainerStateVersion, kTrainerStateVersion);
  const std::set<std::string> known(std::begin(kFields), std::end(kFields));
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!known.count(it.key())) read.fail(it.key(), "is not a trainer.json field of format_version 1");
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  TrainerState state;
  state.step = read.integer("step", 0, kInt64Max);
  state.epoch = read.integer("epoch", 0, kInt64Max);
  state.step_in_epoch = read.integer("step_in_epoch", 0, kInt64Max);
  state.epoch_position = read.integer("epoch_position", 0, kInt64Max);
  state.seed = read.unsigned_integer("seed");
  state.rng_step = read.unsigned_integer("rng_step");
  state.config_hash = read.string("config_hash", true);
  state.world_size = static_cast<int>(read.integer("world_size", 1, kIntMax));
  state.generation = static_cast<int>(read.integer("generation", 0, kIntMax));
  state.optimizer = read.string("optimizer", false);
  // Added after format_version 1 was fixed: absent in older checkpoints, which hold whole state.
  if (root.contains("zero_stage")) state.zero_stage = static_cast<int>(read.integer("zero_stage", 0, 3));
  if (root.contains("samples")) state.samples = read.integer("samples", 0, kInt64Max);
  if (root.contains("checkpoints_saved")) state.checkpoints_saved = read.integer("checkpoints_saved", 0, kInt64Max);
  if (root.contains("checkpoints_failed")) state.checkpoints_failed = read.integer("checkpoints_failed", 0, kInt64Max);
  return state;
}

}  // namespace gradmesh::checkpoint
