// An in-memory image classification data set, already normalised to float.
//
// Normalising once at load time (60000 x 784 floats = 188 MB for
// Fashion-MNIST train) makes assembling a batch a memcpy per sample, which
// keeps the loader thread far ahead of the training step.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::data {

// value = (byte * scale - mean) / std.
struct Normalization {
  float scale = 1.0f / 255;
  float mean = 0;
  float std = 1;  // REQUIRES: finite and != 0
};

// The float of each of the 256 byte values under `norm`: every image path
// (the in-memory IDX set, MDS shards) normalises through it, so the same
// bytes give the same floats whichever path read them. Error(kConfig) when
// scale, mean or std is not finite or std is 0.
std::array<float, 256> normalization_table(const Normalization& norm);

struct ImageDataset {
  int64_t count = 0;
  int64_t channels = 0, height = 0, width = 0;
  std::vector<float> pixels;    // (count, channels, height, width), normalised
  std::vector<int32_t> labels;  // (count), each in [0, num_classes)
  int32_t num_classes = 0;      // as declared by whoever loaded the set, never inferred from the labels

  int64_t sample_numel() const { return channels * height * width; }
};

// How many classes the labels may name, and what set that number (for
// messages, e.g. "model.classes").
struct LabelSpace {
  int32_t classes = 10;  // >= 1
  std::string source = "classes";
};

// Loads an images IDX file, [N, H, W] (channels = 1) or [N, C, H, W], and a
// labels IDX file, [N]; either may be gzip-compressed. num_classes is
// `labels.classes`: the class count is declared, never inferred, so a labels
// file holding 200..255 cannot silently become a 256-class problem.
// Throws gradmesh::Error: kIo/kFormat from read_idx, kFormat when the ranks
// are wrong or the two files hold different counts (the message names both
// files and both counts), kFormat naming the labels file, the index of the
// first label outside [0, labels.classes) and its value, kConfig when
// norm.std is 0 or not finite or labels.classes < 1.
ImageDataset load_image_dataset(const std::string& images_path, const std::string& labels_path,
                                const Normalization& norm = Normalization{}, const LabelSpace& labels = LabelSpace{});

// A learnable synthetic data set for tests and benchmarks: class k has its own
// mean image (standard normal per pixel) and each sample adds noise of
// standard deviation 0.5, so a linear model separates the classes well.
// Labels are uniform over [0, classes); num_classes = classes even if a tiny
// set misses one. A pure function of its arguments (CounterRng, kTest).
// Throws kConfig when count, c, h, w or classes is < 1, or the pixel count
// exceeds 2^31.
ImageDataset synthetic_image_dataset(int64_t count, int64_t c, int64_t h, int64_t w, int32_t classes,
                                     uint64_t seed);

}  // namespace gradmesh::data
