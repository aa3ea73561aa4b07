// Test-set evaluation: mean cross-entropy and accuracy, without recording a tape.
#pragma once

#include "gradmesh/data/image_dataset.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::train {

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;
  double loss_sum = 0;  // summed over the samples: partial results from several ranks add up
  int64_t correct = 0;
};

// Runs the model in eval mode (dropout off) over the whole dataset in batches
// of `batch` and restores training mode afterwards.
EvalResult evaluate(nn::Model& model, const data::ImageDataset& dataset, int64_t batch = 1000);
// The same over dataset rows [begin, end) only (one rank's share of the test set).
EvalResult evaluate_rows(nn::Model& model, const data::ImageDataset& dataset, int64_t begin, int64_t end,
                         int64_t batch = 1000);

}  // namespace gradmesh::train
