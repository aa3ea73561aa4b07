#include "gradmesh/data/sharded_images.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "gradmesh/core/error.h"
#include "gradmesh/data/image_codec.h"

namespace gradmesh::data {

Shape image_shape_of(const std::string& encoding, const std::string& where) {
  const std::string prefix = "ndarray:uint8:";
  Shape dims;
  if (encoding.rfind(prefix, 0) == 0) {
    const std::string rest = encoding.substr(prefix.size());
    size_t at = 0;
    while (at <= rest.size()) {
      const size_t comma = std::min(rest.find(',', at), rest.size());
      const std::string dim = rest.substr(at, comma - at);
      if (dim.empty() || dim.size() > 6 || dim.find_first_not_of("0123456789") != std::string::npos) break;
      dims.push_back(std::stoll(dim));
      at = comma + 1;
      if (comma == rest.size()) break;
    }
  }
  if (dims.size() == 2) dims.insert(dims.begin(), 1);
  const bool ok = dims.size() == 3 && dims[0] >= 1 && dims[0] <= 4 && dims[1] >= 1 && dims[2] >= 1;
  if (!ok)
    throw_error(ErrorKind::kFormat, where,
                "column \"x\" is \"" + encoding + "\"; images are read as ndarray:uint8:C,H,W (C of 1 to 4) or "
                "ndarray:uint8:H,W");
  return dims;
}

ShardedImages::ShardedImages(std::shared_ptr<const MdsReader> set, const Normalization& norm,
                             const LabelSpace& labels, int64_t limit, const ImageAugment& augment)
    : set_(std::move(set)), augment_(augment), labels_(labels) {
  if (labels_.classes < 1) throw_error(ErrorKind::kConfig, labels_.source, "must be >= 1");
  x_ = set_->column("x");
  y_ = set_->column("y");
  const std::string& encoding = set_->columns()[x_].encoding;
  encoded_ = encoding == "jpeg" || encoding == "png" || encoding == "bytes";
  if (encoded_ && set_->count() > 0) {
    const std::vector<std::string> first = set_->sample(0);
    const ImageSize size = peek_image(first[x_], where(0));
    shape_ = {size.channels, size.height, size.width};
  } else {
    shape_ = image_shape_of(encoding, set_->dir());
  }
  if (set_->columns()[y_].encoding != "int")
    throw_error(ErrorKind::kFormat, set_->dir(), "column \"y\" is \"" + set_->columns()[y_].encoding +
                                                     "\"; the class is read as \"int\"");
  count_ = limit > 0 ? std::min(limit, set_->count()) : set_->count();
  if (count_ == 0) throw_error(ErrorKind::kFormat, set_->dir(), "holds no samples");
  table_ = normalization_table(norm);  // as load_image_dataset: identical floats for identical bytes
}

std::vector<int64_t> ShardedImages::shard_sizes() const {
  // With a limit, the shards up to it (the last one cut short).
  std::vector<int64_t> sizes;
  int64_t left = count_;
  for (const MdsShardInfo& s : set_->shards()) {
    if (left == 0) break;
    sizes.push_back(std::min(s.samples, left));
    left -= sizes.back();
  }
  return sizes;
}

std::string ShardedImages::where(int64_t index) const {
  return set_->dir() + "/" + set_->shards()[set_->shard_of(index)].file + ": sample " + std::to_string(index);
}

void ShardedImages::fill(int64_t epoch, int64_t index, float* input, int32_t* targets) const {
  // Each loader thread reuses its own buffers: no allocation per sample.
  thread_local std::string buffer;
  thread_local std::vector<std::string_view> values;
  thread_local std::vector<uint8_t> decoded;
  set_->read(index, buffer, values);
  const auto* pixels = reinterpret_cast<const uint8_t*>(values[x_].data());
  if (encoded_) {
    const ImageSize size = decode_image(values[x_], decoded, where(index));
    if (size != ImageSize{shape_[0], shape_[1], shape_[2]})
      throw_error(ErrorKind::kFormat, where(index),
                  "image is " + shape_str({size.channels, size.height, size.width}) + " (C, H, W); the set's first is " +
                      shape_str(shape_) + ": every image of a set must have one size");
    pixels = decoded.data();
  }
  augment_and_normalise(pixels, shape_, table_, augment_, epoch, index, input);
  int64_t label = 0;
  std::memcpy(&label, values[y_].data(), sizeof label);  // little endian, as Streaming writes it
  if (label < 0 || label >= labels_.classes) {
    throw_error(ErrorKind::kFormat, where(index),
                "label " + std::to_string(label) + " is outside [0, " + std::to_string(labels_.classes) + ") (" +
                    labels_.source + ")");
  }
  *targets = static_cast<int32_t>(label);
}

}  // namespace gradmesh::data
