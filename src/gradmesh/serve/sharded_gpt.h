// ShardedGpt: one GPT served by several processes, split as training splits
// it (pipeline stages, tensor-parallel shards, or both; docs/model-parallel.md).
//
// Rank 0 leads: it takes the requests (the HTTP server, the batcher and the
// generation scheduler run there) and is stage 0's first shard. For each
// batch it sends a command to every other rank, which runs it on its part:
//
//   forward  token rows [n, T] -> the logits of each row's last position
//   step     one token of n sequences, each in its cache slot (generation)
//   release  cache slots whose sequences finished
//   stop     the other ranks return from follow()
//
// A stage passes its activations to the next stage of the same shard index;
// the last stage's shards gather their vocabulary columns and its first
// shard sends the whole logits back to rank 0. Batches stream through the
// stages: rank 0 issues the next batch (and computes its stage-0 part) while
// later stages still work on earlier ones, so with several batches in
// flight (the batcher's inference threads, a generation step beside them)
// every stage is busy. Each rank keeps the key/value caches of its own
// blocks and heads.
//
// Commands go over a group of their own, activations down the pipeline over
// another and logits back over a third, each on its own communication
// thread, so a send that waits never holds up a receive the other way.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/serve/sequence_model.h"

namespace gradmesh::serve {

struct ShardGroups {
  int pp = 1, tp = 1;  // the mesh; the world is pp x tp ranks, tp fastest
  std::shared_ptr<comm::ProcessGroup> world;  // the groups below were made from it; kept alive with them
  // Every rank, on a group of its own: rank 0's commands.
  std::shared_ptr<comm::ProcessGroup> control;
  // pp > 1: the stages of this rank's shard index (rank in it = stage),
  // twice: activations down, logits up to stage 0.
  std::shared_ptr<comm::ProcessGroup> down, up;
  // tp > 1: this stage's shards (the group the model's layers are split over).
  std::shared_ptr<comm::ProcessGroup> tp_group;
};

class ShardedGpt : public SequenceModel {
 public:
  // `part` is this rank's stage and shard of the model, with its weights;
  // it outlives this object.
  ShardedGpt(nn::Gpt& part, ShardGroups groups);
  ~ShardedGpt() override;
  ShardedGpt(const ShardedGpt&) = delete;
  ShardedGpt& operator=(const ShardedGpt&) = delete;

  // Rank 0 (thread-safe, batches are issued in call order).
  // rows [n, T] token ids (as floats) -> the logits of each row's last position [n, vocab_size].
  Tensor forward(const Tensor& rows);
  const nn::GptSpec& spec() const override { return spec_; }
  Tensor step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& slots,
              const std::vector<int64_t>& positions) override;
  void release(int64_t slot) override;
  // Every other rank returns from follow(); later calls fail. Idempotent.
  void stop();

  // The other ranks: runs rank 0's commands until it stops.
  void follow();

 private:
  struct Command;
  // Runs `command` on this rank's part; on rank 0 with pp = 1 returns the
  // whole logits, on every other rank of a last stage nothing useful.
  void leave_together();
  Tensor execute(const Command& command);
  Tensor issue(const Command& command);  // rank 0
  Tensor whole_logits(const Tensor& local);  // last stage: the shards' columns side by side
  void keep_alive();                         // rank 0: a command every hour keeps idle ranks' waits short of their deadline

  nn::Gpt& part_;
  nn::GptSpec spec_;  // the whole model's (stage and split cleared)
  ShardGroups groups_;
  int rank_ = 0, world_ = 1, stage_ = 0, shard_ = 0;
  std::unordered_map<int64_t, nn::KvCache> caches_;  // by slot, this rank's blocks and heads
  std::mutex issue_mutex_;                           // rank 0: one command at a time goes out
  bool stopped_ = false;
  std::thread keepalive_;
  std::mutex keepalive_mutex_;
  std::condition_variable keepalive_wake_;
  bool keepalive_stop_ = false;
};

}  // namespace gradmesh::serve
