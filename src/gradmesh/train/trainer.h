// The training loop a config describes, on one process or as one rank of a
// data-parallel job.
//
// One optimizer step = one global batch (train.batch_size samples over all
// ranks), of which each rank takes a fixed slice (data/sample_order.h) and
// splits it into train.accum_steps micro-batches. Every loss is divided by
// the global batch length, so the gradients summed over micro-batches and
// ranks are the exact batch mean however the batch is split. With several
// ranks, gradients are summed bucket by bucket while backward runs
// (parallel/gradient_reducer.h); rank 0 writes the run's outputs.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/rank_setup.h"
#include "gradmesh/train/run_plan.h"

namespace gradmesh::train {

struct TrainSummary {
  std::string run_dir;
  std::string weights_path;    // empty when output.save_weights is false or on ranks other than 0
  int64_t steps = 0;
  int64_t samples = 0;         // global samples behind the final weights, over every process of the run
  int64_t samples_this_process = 0;  // of those, the ones this process trained (samples_per_s counts these)
  int world_size = 1;
  double train_seconds = 0;    // the step loop only: no data loading, no evaluation
  double samples_per_s = 0;    // global
  double tokens_per_s = 0;     // global, language models only (samples_per_s * block_size)
  double gemm_gflops_per_s = 0;  // this rank's GEMM work in the step loop / train_seconds
  double gemm_roof_gflops = 0;   // the GEMM roof of the run's precision and thread count (0: not measured)
  double exposed_comm_share = 0;  // mean over ranks of time waiting for gradients / step time
  // Pipeline stages (rank 0's view over the logged intervals): each rank's
  // idle share of the pipeline's window (1 - its forward and backward time /
  // the longest stage's window), and (p - 1) / (m + p - 1). Empty / 0 otherwise.
  std::vector<double> pipeline_bubble_per_rank;
  double pipeline_bubble_textbook = 0;
  double final_train_loss = 0;
  double test_loss = 0;
  double test_accuracy = 0;
  bool evaluated = false;
  int64_t resumed_from_step = -1;  // the checkpoint or replica state this run continued from (-1: none)
  int recoveries = 0;              // in-process recoveries this worker took part in
  bool stopped = false;            // SIGTERM: stopped after a step and saved a checkpoint
  std::string checkpoint_path;     // the newest checkpoint this run wrote ("" when none)
  // The whole run, every process of it: restarts (from disk or in process)
  // and checkpoint saves that completed or failed (disk full, I/O errors:
  // training went on).
  int restarts = 0;
  int64_t checkpoints_saved = 0;
  int64_t checkpoints_failed = 0;
  std::vector<double> peak_rss_bytes_per_rank;  // every rank's peak resident set (getrusage), in rank order
};

// Runs the whole training: run directory, metrics.jsonl, trace, report.html,
// progress on `progress` (rank 0), evaluation after each epoch, final
// weights. `group` (null = one process) is the job's world; every rank calls
// this with the same config. Throws gradmesh::Error.
// `options` say what to continue from (--resume, restarts; run_plan.h).
// SIGTERM (after catch_stop_signal()) ends the run after the step in
// progress with a synchronous checkpoint and summary.stopped set.
TrainSummary run_training(const Config& config, std::FILE* progress = stderr,
                          std::shared_ptr<comm::ProcessGroup> group = nullptr, const RunOptions& options = {});

}  // namespace gradmesh::train
