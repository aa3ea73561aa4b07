// trainer.json: where training stands after the checkpoint's step, enough to
// continue exactly (same batches, same random numbers) from it.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::checkpoint {

inline constexpr int kTrainerStateVersion = 1;

struct TrainerState {
  int format_version = kTrainerStateVersion;
  int64_t step = 0;            // optimizer steps completed
  int64_t epoch = 0;           // epoch the next step belongs to
  int64_t step_in_epoch = 0;   // global batches of that epoch already trained
  int64_t epoch_position = 0;  // samples of that epoch's global order already consumed
  uint64_t seed = 0;           // train.seed; the RNG is counter-based, keyed by (seed, purpose, step, index),
  uint64_t rng_step = 0;       //   so (seed, rng_step) is its whole state
  std::string config_hash;     // hex xxh64 of the training-relevant config text
  int world_size = 1;
  int generation = 0;
  std::string optimizer;       // "sgd" | "adamw"
  int zero_stage = 0;          // ZeRO stage that wrote the optimizer state (0: whole, 1 or 2: one shard per rank);
                               //   optional on read (files before it mean 0)
  // The whole run up to this checkpoint, across every process that trained
  // it (the resumed ones too), so a resumed run's summary counts them all.
  // Optional on read: older files have no samples (-1) and count no saves.
  int64_t samples = -1;             // global samples behind these weights
  int64_t checkpoints_saved = 0;    // this one included
  int64_t checkpoints_failed = 0;   // saves that failed before it

  bool operator==(const TrainerState&) const = default;
};

// Pretty-printed JSON with every field, in declaration order.
std::string trainer_state_json(const TrainerState& state);

// Strict: not JSON, not an object, an unknown format_version, a missing
// (but zero_stage may be absent), unknown or ill-typed field, a negative count, world_size < 1 or an empty
// optimizer is Error(kFormat) naming `source` and the field.
TrainerState parse_trainer_state(const std::string& text, const std::string& source);

}  // namespace gradmesh::checkpoint
