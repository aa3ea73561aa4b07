// What generation runs on: a GPT that advances many sequences by one token
// per step, each with its own key/value cache, which the model keeps under a
// slot number the caller chooses. LocalSequenceModel is a GPT in this
// process; ShardedGpt (sharded_gpt.h) one split across processes, whose
// every rank keeps the caches of its own blocks and heads.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "gradmesh/core/tensor.h"
#include "gradmesh/nn/gpt.h"

namespace gradmesh::serve {

class SequenceModel {
 public:
  virtual ~SequenceModel() = default;
  virtual const nn::GptSpec& spec() const = 0;
  // Feeds tokens[i] to the sequence in slots[i] at position positions[i]
  // (0: the slot starts over, empty; otherwise the slot's length so far) and
  // returns the next-token logits [n, vocab_size].
  // REQUIRES: positions[i] < block_size; slots distinct.
  virtual Tensor step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& slots,
                      const std::vector<int64_t>& positions) = 0;
  // The slot's sequence is finished: its cache may go.
  virtual void release(int64_t slot) = 0;
};

// Caches preallocated to the whole context per slot (a sequence never
// outgrows block_size, and one allocation per sequence keeps each step free
// of allocation); a released slot's memory is returned at once.
class LocalSequenceModel : public SequenceModel {
 public:
  explicit LocalSequenceModel(nn::Gpt& gpt) : gpt_(gpt) {}
  const nn::GptSpec& spec() const override { return gpt_.spec(); }
  Tensor step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& slots,
              const std::vector<int64_t>& positions) override;
  void release(int64_t slot) override { caches_.erase(slot); }

 private:
  nn::Gpt& gpt_;
  std::unordered_map<int64_t, nn::KvCache> caches_;
};

// The caches of `slots` in `caches` (made with `gpt`'s new_cache() when
// missing), each emptied where its position is 0. Error(kUsage) when a
// position is not its slot's length (the caller lost count).
std::vector<nn::KvCache*> caches_at(nn::Gpt& gpt, std::unordered_map<int64_t, nn::KvCache>& caches,
                                    const std::vector<int64_t>& slots, const std::vector<int64_t>& positions);

}  // namespace gradmesh::serve
