// Test support for the checkpoint tests: snapshots with known contents and
// bit-exact comparison of what a loader returns.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/checkpoint/trainer_state.h"

namespace gradmesh::checkpoint {

// gtest prints a mismatching TrainerState as its JSON rather than raw bytes.
inline void PrintTo(const TrainerState& state, std::ostream* out) { *out << trainer_state_json(state); }

}  // namespace gradmesh::checkpoint

namespace gradmesh::checkpoint::testing {

inline TrainerState trainer_at(int64_t step) {
  TrainerState state;
  state.step = step;
  state.epoch = step / 10;
  state.step_in_epoch = step % 10;
  state.epoch_position = (step % 10) * 32;
  state.seed = 0xfedcba9876543210ull;  // above int64's range: must survive JSON exactly
  state.rng_step = static_cast<uint64_t>(step) * 3;
  state.config_hash = "0123456789abcdef";
  state.world_size = 2;
  state.generation = 1;
  state.optimizer = "adamw";
  state.samples = step * 32;
  state.checkpoints_saved = step / 50;
  state.checkpoints_failed = 1;
  return state;
}

// Values that depend on the step, including ones (negative zero, a NaN
// payload, a denormal) that only a bit-exact writer keeps.
inline Tensor tensor_for(int64_t step, const Shape& shape, float offset) {
  Tensor t = Tensor::empty(shape);
  float* data = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) data[i] = offset + static_cast<float>(step) * 0.5f + static_cast<float>(i) * 0.25f;
  if (t.numel() >= 3) {
    data[0] = -0.0f;
    const uint32_t nan_bits = 0x7fc00123u + static_cast<uint32_t>(step);
    std::memcpy(&data[1], &nan_bits, 4);
    data[2] = 1e-42f;
  }
  return t;
}

// model.safetensors (elements_per_tensor floats each in two tensors), two
// optimizer shards and trainer.json.
inline Snapshot snapshot_at(int64_t step, int64_t elements_per_tensor = 12) {
  Snapshot s;
  s.step = step;
  s.world_size = 2;
  s.tensor_files.push_back({"model.safetensors",
                            copy_tensors({{"0.weight", tensor_for(step, {elements_per_tensor}, 1)},
                                          {"0.bias", tensor_for(step, {3}, 2)}}),
                            {{"format", "pt"}},
                            0});
  for (int shard = 1; shard <= 2; ++shard) {
    s.tensor_files.push_back({shard_file_name("optimizer", shard, 2),
                              copy_tensors({{"0.weight.exp_avg", tensor_for(step, {4}, 10.0f * shard)}}),
                              {},
                              shard - 1});
  }
  s.text_files.emplace_back("trainer.json", trainer_state_json(trainer_at(step)));
  return s;
}

inline std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw()), t.nbytes());
}

// Every tensor of `expected` is in `loaded` with the same name, dtype, shape and bits.
inline void expect_same_tensors(const TensorFile& expected, const SafetensorsFile& loaded) {
  ASSERT_EQ(loaded.tensors.size(), expected.tensors.size()) << expected.name;
  EXPECT_EQ(loaded.metadata, expected.metadata) << expected.name;
  for (size_t i = 0; i < expected.tensors.size(); ++i) {
    const NamedTensor& want = expected.tensors[i];
    const Tensor* got = loaded.find(want.name);
    ASSERT_NE(got, nullptr) << expected.name << ": " << want.name;
    EXPECT_EQ(got->dtype(), want.tensor.dtype()) << want.name;
    EXPECT_EQ(got->shape(), want.tensor.shape()) << want.name;
    EXPECT_EQ(bytes_of(*got), bytes_of(want.tensor)) << want.name;
  }
}

inline void expect_checkpoint_holds(const LoadedCheckpoint& loaded, const Snapshot& snapshot) {
  EXPECT_EQ(loaded.step, snapshot.step);
  EXPECT_EQ(loaded.trainer, trainer_at(snapshot.step));
  for (const TensorFile& file : snapshot.tensor_files) expect_same_tensors(file, loaded.read_tensor_file(file.name));
}

}  // namespace gradmesh::checkpoint::testing
