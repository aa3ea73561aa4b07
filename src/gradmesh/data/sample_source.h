// What a batch loader or an evaluation reads samples from.
//
// A sample is an input of a fixed shape and a fixed number of integer
// targets: an image and its class (one target), or a window of tokens and
// the tokens that follow each position (block_size targets). A source is a
// pure function of (epoch, index), so batches are reproducible on any
// number of ranks and threads and a resumed run sees the same samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/core/tensor.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/token_file.h"

namespace gradmesh::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Samples per epoch.
  virtual int64_t count() const = 0;
  // One sample's input shape: {C, H, W} for images, {block_size} for tokens.
  virtual Shape sample_shape() const = 0;
  // Targets per sample: 1 (a class) or block_size (next tokens).
  virtual int64_t targets_per_sample() const = 0;
  // Writes sample `index` (0 <= index < count()) of `epoch`: shape_numel(sample_shape())
  // floats of input and targets_per_sample() targets. Called from several
  // loader threads at once (data.workers), each sample by one of them.
  virtual void fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const = 0;
  // "samples" or "tokens": what a target is, for throughput figures.
  virtual const char* target_unit() const = 0;
  // Samples per shard, in order, summing to count(), for a source read from
  // shards (the loader's shard-aware order); empty for one held in memory.
  virtual std::vector<int64_t> shard_sizes() const { return {}; }

  int64_t sample_numel() const { return shape_numel(sample_shape()); }
};

// An ImageDataset as a source (the same sample for every epoch). The dataset
// must outlive the source.
class ImageSamples : public SampleSource {
 public:
  // Throws kInternal when the dataset's vectors disagree with its count.
  explicit ImageSamples(const ImageDataset& data);
  int64_t count() const override { return data_.count; }
  Shape sample_shape() const override { return {data_.channels, data_.height, data_.width}; }
  int64_t targets_per_sample() const override { return 1; }
  void fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const override;
  const char* target_unit() const override { return "samples"; }

 private:
  const ImageDataset& data_;
};

// Windows of block_size tokens from a token stream, each predicting its
// next tokens. The token ids travel as floats (exact below 2^24). A window
// holding a token >= vocab_size (when > 0) is Error(kFormat) naming `what`
// and the position: a mapped stream is checked as it is read.
class TokenSource : public SampleSource {
 public:
  Shape sample_shape() const override { return {block_}; }
  int64_t targets_per_sample() const override { return block_; }
  const char* target_unit() const override { return "tokens"; }

 protected:
  // Throws kConfig (naming `what`) when there are not block_size + 1 tokens.
  TokenSource(TokenStream tokens, int64_t block_size, const std::string& what, int vocab_size);
  // The window starting at `start` and the tokens one position later.
  void copy_window(int64_t start, float* input, int32_t* targets) const;

  TokenStream tokens_;
  int64_t block_;
  std::string what_;
  int vocab_size_;
};

// Language-model training windows: sample `index` of `epoch` is the window
// starting at CounterRng(seed, kWindow, epoch).below(index, n - block_size).
class TokenWindows : public TokenSource {
 public:
  // `windows` per epoch; 0 = tokens / block_size.
  TokenWindows(TokenStream tokens, int64_t block_size, int64_t windows, uint64_t seed, const std::string& what,
               int vocab_size = 0);
  int64_t count() const override { return windows_; }
  void fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const override;

 private:
  int64_t windows_;
  uint64_t seed_;
};

// Evaluation windows: the tokens cut into consecutive, non-overlapping
// windows (the last partial one dropped), the same for every epoch.
class TokenBlocks : public TokenSource {
 public:
  // The first `limit` windows only (0 = all).
  TokenBlocks(TokenStream tokens, int64_t block_size, const std::string& what, int64_t limit = 0, int vocab_size = 0);
  int64_t count() const override { return count_; }
  void fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const override;

 private:
  int64_t count_;
};

}  // namespace gradmesh::data
