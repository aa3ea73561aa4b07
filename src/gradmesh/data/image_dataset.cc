#include "gradmesh/data/image_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/data/idx.h"

namespace gradmesh::data {
namespace {

// Streams of the synthetic set; each is CounterRng(seed, kTest, stream).
constexpr uint64_t kLabelStream = 0;
constexpr uint64_t kPrototypeStream = 1;
constexpr uint64_t kNoiseStream = 2;
constexpr float kNoiseStd = 0.5f;
constexpr int64_t kMaxSyntheticPixels = int64_t{1} << 31;

void check_norm(const Normalization& norm) {
  if (!std::isfinite(norm.std) || norm.std == 0 || !std::isfinite(norm.scale) || !std::isfinite(norm.mean))
    throw_error(ErrorKind::kConfig, "normalization",
                "scale, mean and std must be finite and std non-zero; got scale=" + std::to_string(norm.scale) +
                    " mean=" + std::to_string(norm.mean) + " std=" + std::to_string(norm.std));
}

// The first label outside [0, space.classes) is named with its index, so a
// wrong file (or a wrong class count) is found without a hex dump.
void check_labels(const std::vector<uint8_t>& labels, const LabelSpace& space, const std::string& path) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < space.classes) continue;
    throw_error(ErrorKind::kFormat, path,
                "label " + std::to_string(i) + " is " + std::to_string(labels[i]) + ", outside [0, " +
                    std::to_string(space.classes) + ") (" + space.source + " = " + std::to_string(space.classes) +
                    "); is this the right labels file, or does the data set have more classes?");
  }
}

}  // namespace

std::array<float, 256> normalization_table(const Normalization& norm) {
  check_norm(norm);
  std::array<float, 256> table;
  for (int b = 0; b < 256; ++b) table[b] = (static_cast<float>(b) * norm.scale - norm.mean) / norm.std;
  return table;
}

ImageDataset load_image_dataset(const std::string& images_path, const std::string& labels_path,
                                const Normalization& norm, const LabelSpace& label_space) {
  check_norm(norm);
  if (label_space.classes < 1)
    throw_error(ErrorKind::kConfig, label_space.source,
                "expected at least 1 class, got " + std::to_string(label_space.classes));
  const IdxArray images = read_idx(images_path);
  if (images.dims.size() != 3 && images.dims.size() != 4)
    throw_error(ErrorKind::kFormat, images_path,
                "images must be [N, H, W] or [N, C, H, W], file holds " + idx_dims_str(images.dims) +
                    "; is this a labels file?");
  const IdxArray labels = read_idx(labels_path);
  if (labels.dims.size() != 1)
    throw_error(ErrorKind::kFormat, labels_path,
                "labels must be one-dimensional [N], file holds " + idx_dims_str(labels.dims) +
                    "; is this an images file?");
  if (images.dims[0] != labels.dims[0])
    throw_error(ErrorKind::kFormat, images_path,
                "holds " + std::to_string(images.dims[0]) + " images but " + labels_path + " holds " +
                    std::to_string(labels.dims[0]) + " labels; pass the labels file that belongs to these images");

  ImageDataset ds;
  ds.count = images.dims[0];
  const bool has_channels = images.dims.size() == 4;
  ds.channels = has_channels ? images.dims[1] : 1;
  ds.height = images.dims[has_channels ? 2 : 1];
  ds.width = images.dims[has_channels ? 3 : 2];

  // 256 possible bytes: normalise through a table, identical for every pixel.
  const std::array<float, 256> table = normalization_table(norm);
  ds.pixels.resize(images.values.size());
  std::transform(images.values.begin(), images.values.end(), ds.pixels.begin(),
                 [&](uint8_t b) { return table[b]; });

  check_labels(labels.values, label_space, labels_path);
  ds.labels.assign(labels.values.begin(), labels.values.end());
  ds.num_classes = label_space.classes;
  return ds;
}

ImageDataset synthetic_image_dataset(int64_t count, int64_t c, int64_t h, int64_t w, int32_t classes,
                                     uint64_t seed) {
  if (count < 1 || c < 1 || h < 1 || w < 1 || classes < 1)
    throw_error(ErrorKind::kConfig, "synthetic data set",
                "count, channels, height, width and classes must all be >= 1; got " + std::to_string(count) + ", " +
                    std::to_string(c) + ", " + std::to_string(h) + ", " + std::to_string(w) + ", " +
                    std::to_string(classes));
  const int64_t numel = c * h * w;
  if (numel > kMaxSyntheticPixels / count)
    throw_error(ErrorKind::kConfig, "synthetic data set",
                std::to_string(count) + " samples of " + std::to_string(numel) + " pixels exceed 2^31 pixels");

  ImageDataset ds;
  ds.count = count;
  ds.channels = c;
  ds.height = h;
  ds.width = w;
  ds.num_classes = classes;
  const CounterRng label_rng(seed, RngPurpose::kTest, kLabelStream);
  const CounterRng prototype_rng(seed, RngPurpose::kTest, kPrototypeStream);
  const CounterRng noise_rng(seed, RngPurpose::kTest, kNoiseStream);
  ds.labels.resize(static_cast<size_t>(count));
  ds.pixels.resize(static_cast<size_t>(count * numel));
  for (int64_t i = 0; i < count; ++i) {
    const auto label = static_cast<int32_t>(label_rng.below(static_cast<uint64_t>(i), static_cast<uint64_t>(classes)));
    ds.labels[i] = label;
    float* dst = ds.pixels.data() + i * numel;
    for (int64_t j = 0; j < numel; ++j)
      dst[j] = prototype_rng.normal(static_cast<uint64_t>(label * numel + j)) +
               kNoiseStd * noise_rng.normal(static_cast<uint64_t>(i * numel + j));
  }
  return ds;
}

}  // namespace gradmesh::data
