// Evaluation: mean cross-entropy and accuracy over a data set, without recording a tape.
#pragma once

#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/model.h"

namespace gradmesh::train {

// Over targets: one per image, or one per token position of a language model
// (then loss is the mean next-token cross-entropy and accuracy how often the
// most likely next token was the right one).
struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;  // targets evaluated
  double loss_sum = 0;  // summed over the targets: partial results from several ranks add up
  int64_t correct = 0;
};

// Runs the model in eval mode (dropout off) over the whole dataset in batches
// of about `batch` targets and restores training mode afterwards.
EvalResult evaluate(nn::Model& model, const data::SampleSource& source, int64_t batch = 1000);
EvalResult evaluate(nn::Model& model, const data::ImageDataset& dataset, int64_t batch = 1000);
// The same over samples [begin, end) only (one rank's share of the test set).
// Rows [begin, end) through a pipeline (`forward`: the pp group, rank =
// stage; `model` is this rank's stage): each batch goes stage by stage, the
// last stage scores it, and every stage returns the sums. Collective over `forward`.
EvalResult evaluate_pipeline_rows(nn::Model& model, const data::SampleSource& source, int64_t begin, int64_t end,
                                  comm::ProcessGroup& forward, int64_t width, int64_t batch = 1000);
EvalResult evaluate_rows(nn::Model& model, const data::SampleSource& source, int64_t begin, int64_t end,
                         int64_t batch = 1000);

}  // namespace gradmesh::train
