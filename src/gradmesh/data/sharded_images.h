// Image classification samples read from an MDS set (data/mds.h) as the
// loader asks for them: column "x" holds the image, either its pixels
// (ndarray:uint8:C,H,W, channels first, as IDX and PyTorch lay them out) or
// an encoded JPEG or PNG ("jpeg", "png" or "bytes", decoded by the loader's
// threads), and column "y" the class (int). Nothing is held but the open
// shards: memory does not grow with the set, and a rank reads only the
// samples its slice of each batch needs. Pixels are normalised through the
// same 256-entry table as the in-memory IDX path, so a set prepared from IDX
// files trains bit for bit the same; training sets may also be augmented
// (image_augment.h) in the same pass.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "gradmesh/data/image_augment.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/sample_source.h"

namespace gradmesh::data {

class ShardedImages : public SampleSource {
 public:
  // Error(kFormat) naming the set when it lacks the columns or "x" is not a
  // fixed-shape uint8 array; kConfig as load_image_dataset for `norm` and
  // `labels`. `limit` > 0: only the first `limit` samples. An encoded set's
  // image size is its first sample's; a sample of another size is an error
  // when it is read.
  ShardedImages(std::shared_ptr<const MdsReader> set, const Normalization& norm, const LabelSpace& labels,
                int64_t limit = 0, const ImageAugment& augment = {});

  int64_t count() const override { return count_; }
  Shape sample_shape() const override { return shape_; }
  int64_t targets_per_sample() const override { return 1; }
  // Error(kFormat) naming the shard and the sample for a label outside the
  // label space, an image that does not decode or has another size, or a malformed sample.
  void fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const override;
  const char* target_unit() const override { return "samples"; }
  std::vector<int64_t> shard_sizes() const override;

  const MdsReader& set() const { return *set_; }
  bool encoded() const { return encoded_; }

 private:
  std::shared_ptr<const MdsReader> set_;
  std::string where(int64_t index) const;  // "DIR/shard.N.mds: sample I"

  size_t x_ = 0, y_ = 0;  // the columns
  bool encoded_ = false;  // "x" holds JPEG or PNG files' bytes
  ImageAugment augment_;
  Shape shape_;
  int64_t count_ = 0;
  std::array<float, 256> table_{};
  LabelSpace labels_;
};

// The "x" column's shape, {C, H, W}, from its encoding "ndarray:uint8:C,H,W"
// (or H,W: one channel). Error(kFormat) naming `where` otherwise.
Shape image_shape_of(const std::string& encoding, const std::string& where);

}  // namespace gradmesh::data
