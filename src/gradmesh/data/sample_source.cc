#include "gradmesh/data/sample_source.h"

#include <algorithm>
#include <cstring>

#include "gradmesh/core/error.h"
#include "gradmesh/core/resource_usage.h"
#include "gradmesh/core/rng.h"

namespace gradmesh::data {
namespace {

}  // namespace

ImageSamples::ImageSamples(const ImageDataset& d) : data_(d) {
  GRADMESH_CHECK(d.count >= 0 && d.labels.size() == static_cast<size_t>(d.count) &&
                     d.pixels.size() == static_cast<size_t>(d.count * d.sample_numel()),
                 "ImageDataset of " + std::to_string(d.count) + " samples has " + std::to_string(d.labels.size()) +
                     " labels and " + std::to_string(d.pixels.size()) + " pixels");
}

void ImageSamples::fill(int64_t, int64_t index, float* input, int32_t* targets) const {
  const int64_t numel = data_.sample_numel();
  std::memcpy(input, data_.pixels.data() + index * numel, static_cast<size_t>(numel) * sizeof(float));
  targets[0] = data_.labels[static_cast<size_t>(index)];
}

TokenSource::TokenSource(TokenStream tokens, int64_t block_size, const std::string& what, int vocab_size)
    : tokens_(std::move(tokens)), block_(block_size), what_(what), vocab_size_(vocab_size) {
  if (block_size < 1 || tokens_.size() < block_size + 1)
    throw_error(ErrorKind::kConfig, what,
                "holds " + std::to_string(tokens_.size()) + " tokens; a window of model.block_size = " +
                    std::to_string(block_size) + " needs at least " + std::to_string(block_size + 1) +
                    " (its inputs and the token after them); use more text or a smaller block_size");
}

void TokenSource::copy_window(int64_t start, float* input, int32_t* targets) const {
  uint32_t next = tokens_[start];
  for (int64_t j = 0; j < block_; ++j) {
    const uint32_t token = next;
    next = tokens_[start + j + 1];
    if (vocab_size_ > 0 && (token >= static_cast<uint32_t>(vocab_size_) || next >= static_cast<uint32_t>(vocab_size_))) {
      const int64_t at = start + j + (token >= static_cast<uint32_t>(vocab_size_) ? 0 : 1);
      throw_error(ErrorKind::kFormat, what_,
                  "token " + std::to_string(at) + " is " + std::to_string(tokens_[at]) + ", outside the vocabulary [0, " +
                      std::to_string(vocab_size_) + ")");
    }
    input[j] = static_cast<float>(token);
    targets[j] = static_cast<int32_t>(next);
  }
  count_io(IoCounter::kDatasetRead, static_cast<uint64_t>((block_ + 1) * tokens_.width()));
}

TokenWindows::TokenWindows(TokenStream tokens, int64_t block_size, int64_t windows, uint64_t seed,
                           const std::string& what, int vocab_size)
    : TokenSource(std::move(tokens), block_size, what, vocab_size), windows_(windows), seed_(seed) {
  if (windows_ <= 0) windows_ = std::max<int64_t>(1, tokens_.size() / block_size);
}

void TokenWindows::fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const {
  // Starts in [0, n - block]: the window and the token after it fit.
  const auto starts = static_cast<uint64_t>(tokens_.size() - block_);
  const CounterRng rng(seed_, RngPurpose::kWindow, static_cast<uint64_t>(epoch));
  copy_window(static_cast<int64_t>(rng.below(static_cast<uint64_t>(index), starts)), input, targets);
}

TokenBlocks::TokenBlocks(TokenStream tokens, int64_t block_size, const std::string& what, int64_t limit,
                         int vocab_size)
    : TokenSource(std::move(tokens), block_size, what, vocab_size) {
  count_ = (tokens_.size() - 1) / block_size;
  if (limit > 0 && limit < count_) count_ = limit;
}

void TokenBlocks::fill(int64_t, int64_t index, float* input, int32_t* targets) const {
  copy_window(index * block_, input, targets);
}

}  // namespace gradmesh::data
