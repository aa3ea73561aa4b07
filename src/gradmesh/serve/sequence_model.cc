#include "gradmesh/serve/sequence_model.h"

#include <string>

#include "gradmesh/core/error.h"

namespace gradmesh::serve {

std::vector<nn::KvCache*> caches_at(nn::Gpt& gpt, std::unordered_map<int64_t, nn::KvCache>& caches,
                                    const std::vector<int64_t>& slots, const std::vector<int64_t>& positions) {
  GRADMESH_CHECK(slots.size() == positions.size(), "one position per slot");
  std::vector<nn::KvCache*> out;
  out.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    nn::KvCache& cache = caches[slots[i]];
    if (cache.keys.empty()) cache = gpt.new_cache();
    if (positions[i] == 0) cache.length = 0;  // the rows past length are never read
    if (cache.length != positions[i])
      throw_error(ErrorKind::kUsage, "sequence slot " + std::to_string(slots[i]),
                  "is at position " + std::to_string(cache.length) + ", not " + std::to_string(positions[i]));
    out.push_back(&cache);
  }
  return out;
}

Tensor LocalSequenceModel::step(const std::vector<int64_t>& tokens, const std::vector<int64_t>& slots,
                                const std::vector<int64_t>& positions) {
  return gpt_.next_token_logits_batch(tokens, caches_at(gpt_, caches_, slots, positions));
}

}  // namespace gradmesh::serve
