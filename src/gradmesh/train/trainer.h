// The training loop a config describes, on one process.
//
// One optimizer step = one global batch (train.batch_size samples), split into
// train.accum_steps micro-batches whose gradients add up before the step.
// Every loss is divided by the global batch length, so the summed gradient is
// the exact batch mean however the batch is split (and, later, however many
// ranks share it).
#pragma once

#include <cstdio>
#include <string>

#include "gradmesh/data/image_dataset.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

struct TrainSummary {
  std::string run_dir;
  std::string weights_path;    // empty when output.save_weights is false
  int64_t steps = 0;
  int64_t samples = 0;
  double train_seconds = 0;    // the step loop only: no data loading, no evaluation
  double samples_per_s = 0;
  double gemm_gflops_per_s = 0;  // GEMM work in the step loop / train_seconds
  double final_train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  bool evaluated = false;
};

// Loads the train and test sets a data config names (honouring limit_train/limit_test).
data::ImageDataset load_train_set(const DataConfig& config);
data::ImageDataset load_test_set(const DataConfig& config);

// Runs the whole training: run directory, metrics.jsonl, progress on `progress`,
// evaluation after each epoch, final weights. Throws gradmesh::Error.
TrainSummary run_training(const Config& config, std::FILE* progress = stderr);

}  // namespace gradmesh::train
