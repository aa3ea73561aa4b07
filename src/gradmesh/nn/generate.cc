#include "gradmesh/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::nn {

int64_t sample_token(const float* logits, int64_t vocab, const GenerateOptions& options, float u) {
  if (options.temperature == 0.0) return std::max_element(logits, logits + vocab) - logits;
  // Candidates in descending logit order (ties by index, so the draw is deterministic).
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> weights(static_cast<size_t>(keep));
  const double top = logits[order[0]];
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += weights[i] = std::exp((logits[order[i]] - top) / options.temperature);
  double target = static_cast<double>(u) * total;
  for (int64_t i = 0; i < keep; ++i) {
    target -= weights[i];
    if (target < 0) return order[i];
  }
  return order[keep - 1];  // u * total rounded up to the total
}

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, const GenerateOptions& options,
                              const std::function<void(int64_t)>& on_token) {
  const GptSpec& spec = model.spec();
  if (prompt.empty()) throw_error(ErrorKind::kUsage, "--prompt", "is empty: generation needs at least one token");
  if (static_cast<int64_t>(prompt.size()) > spec.block_size)
    throw_error(ErrorKind::kUsage, "--prompt",
                "holds " + std::to_string(prompt.size()) + " tokens, more than the model's context of " +
                    std::to_string(spec.block_size));
  if (options.max_tokens < 0) throw_error(ErrorKind::kUsage, "--max-tokens", "must be >= 0");
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    throw_error(ErrorKind::kUsage, "--temperature", "must be a finite number >= 0");
  if (options.top_k < 0) throw_error(ErrorKind::kUsage, "--top-k", "must be >= 0");
  model.set_training(false);
  KvCache cache = model.new_cache();
  Tensor logits;
  for (int64_t token : prompt) logits = model.next_token_logits(token, cache);
  const CounterRng rng(options.seed, RngPurpose::kSampling, 0);
  std::vector<int64_t> context = prompt, out;
  for (int64_t i = 0; i < options.max_tokens; ++i) {
    const int64_t next = sample_token(logits.data(), spec.vocab_size, options, rng.uniform(static_cast<uint64_t>(i)));
    out.push_back(next);
    context.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == options.max_tokens) break;
    if (cache.length < spec.block_size) {
      logits = model.next_token_logits(next, cache);
      continue;
    }
    // The context is full: start again from its last half, so positions
    // stay inside the table and each refill is paid for by block_size / 2
    // cheap tokens.
    cache = model.new_cache();
    const auto keep = static_cast<size_t>(std::max<int64_t>(1, spec.block_size / 2));
    for (size_t t = context.size() - keep; t < context.size(); ++t) logits = model.next_token_logits(context[t], cache);
  }
  return out;
}

}  // namespace gradmesh::nn
