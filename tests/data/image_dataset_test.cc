#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "data/idx_files.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/image_dataset.h"

namespace gradmesh::data {
namespace {

using testing::Bytes;
using testing::expect_error;
using testing::idx_bytes;
using testing::ScratchDir;
using testing::write_file;
using testing::write_gz;

constexpr const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

TEST(LoadImageDataset, ThreeDimensionalImagesAreOneChannel) {
  ScratchDir dir;
  write_file(dir.file("img"), idx_bytes(0x08, {3, 2, 2}, {0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8}));
  write_gz(dir.file("lbl.gz"), idx_bytes(0x08, {3}, {4, 0, 2}));
  const ImageDataset ds = load_image_dataset(dir.file("img"), dir.file("lbl.gz"), Normalization{});
  EXPECT_EQ(ds.count, 3);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.height, 2);
  EXPECT_EQ(ds.width, 2);
  EXPECT_EQ(ds.sample_numel(), 4);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{4, 0, 2}));
  EXPECT_EQ(ds.num_classes, 10);  // declared (LabelSpace's default), not the largest label + 1
  ASSERT_EQ(ds.pixels.size(), 12u);
  EXPECT_FLOAT_EQ(ds.pixels[0], 0.0f);
  EXPECT_FLOAT_EQ(ds.pixels[1], 1.0f);
  EXPECT_FLOAT_EQ(ds.pixels[2], 0.2f);
  EXPECT_FLOAT_EQ(ds.pixels[11], 8.0f / 255);
}

TEST(LoadImageDataset, FourDimensionalImagesAndNormalization) {
  ScratchDir dir;
  Bytes payload(2 * 3 * 2 * 2);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 10);
  write_file(dir.file("img"), idx_bytes(0x08, {2, 3, 2, 2}, payload));
  write_file(dir.file("lbl"), idx_bytes(0x08, {2}, {1, 1}));
  Normalization norm;
  norm.scale = 0.5f;
  norm.mean = 4.0f;
  norm.std = 2.0f;
  const ImageDataset ds = load_image_dataset(dir.file("img"), dir.file("lbl"), norm, LabelSpace{3, "classes"});
  EXPECT_EQ(ds.channels, 3);
  EXPECT_EQ(ds.height, 2);
  EXPECT_EQ(ds.width, 2);
  EXPECT_EQ(ds.num_classes, 3);
  for (size_t i = 0; i < payload.size(); ++i) EXPECT_FLOAT_EQ(ds.pixels[i], (payload[i] * 0.5f - 4.0f) / 2.0f) << i;
}

TEST(LoadImageDataset, CountMismatchNamesBothFilesAndCounts) {
  ScratchDir dir;
  write_file(dir.file("img"), idx_bytes(0x08, {3, 1, 1}, {1, 2, 3}));
  write_file(dir.file("lbl"), idx_bytes(0x08, {2}, {0, 1}));
  expect_error([&] { load_image_dataset(dir.file("img"), dir.file("lbl")); }, ErrorKind::kFormat, dir.file("img"),
               {"3 images", dir.file("lbl"), "2 labels"});
}

TEST(LoadImageDataset, RejectsWrongRanks) {
  ScratchDir dir;
  write_file(dir.file("img"), idx_bytes(0x08, {3, 1, 1}, {1, 2, 3}));
  write_file(dir.file("lbl"), idx_bytes(0x08, {3}, {0, 1, 2}));
  // Swapped arguments: each file has the wrong rank for its role.
  expect_error([&] { load_image_dataset(dir.file("lbl"), dir.file("img")); }, ErrorKind::kFormat, dir.file("lbl"),
               {"[N, H, W]", "holds 3"});
  write_file(dir.file("lbl2"), idx_bytes(0x08, {3, 1}, {0, 1, 2}));
  expect_error([&] { load_image_dataset(dir.file("img"), dir.file("lbl2")); }, ErrorKind::kFormat, dir.file("lbl2"),
               {"one-dimensional", "3x1"});
}

// A labels file holding 200..255 must not become a 256-class problem.
TEST(LoadImageDataset, LabelsOutsideTheDeclaredClassesAreRejected) {
  ScratchDir dir;
  Bytes pixels(8 * 2 * 2, 7);
  write_file(dir.file("img"), idx_bytes(0x08, {8, 2, 2}, pixels));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x08, {8}, {3, 9, 0, 1, 2, 200, 255, 201}));
  const LabelSpace ten{10, "model.classes"};
  expect_error([&] { load_image_dataset(dir.file("img"), dir.file("train-labels-idx1-ubyte.gz"), {}, ten); },
               ErrorKind::kFormat, dir.file("train-labels-idx1-ubyte.gz"),
               {"label 5 is 200, outside [0, 10) (model.classes = 10)"});
  // The bound is exclusive and comes from the declared count alone.
  write_file(dir.file("lbl"), idx_bytes(0x08, {8}, {0, 1, 2, 3, 4, 3, 2, 1}));
  const LabelSpace four{4, "model.classes"};
  expect_error([&] { load_image_dataset(dir.file("img"), dir.file("lbl"), {}, four); }, ErrorKind::kFormat,
               dir.file("lbl"), {"label 4 is 4, outside [0, 4) (model.classes = 4)"});
  const ImageDataset five = load_image_dataset(dir.file("img"), dir.file("lbl"), {}, LabelSpace{5, "model.classes"});
  EXPECT_EQ(five.num_classes, 5);
  EXPECT_EQ(five.labels[4], 4);
}

TEST(LoadImageDataset, ReadErrorsCarryThePath) {
  ScratchDir dir;
  write_file(dir.file("img"), idx_bytes(0x08, {3, 1, 1}, {1, 2, 3}));
  expect_error([&] { load_image_dataset(dir.file("img"), dir.file("missing")); }, ErrorKind::kIo,
               dir.file("missing"));
}

TEST(LoadImageDataset, RejectsDegenerateNormalization) {
  Normalization norm;
  norm.std = 0;
  try {
    load_image_dataset("/unused/img", "/unused/lbl", norm);
    ADD_FAILURE() << "std = 0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
  }
  norm.std = 1;
  norm.mean = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(load_image_dataset("/unused/img", "/unused/lbl", norm), Error);
}

TEST(FashionMnist, TestSetLoads) {
  const std::string images = std::string(kFashionDir) + "/t10k-images-idx3-ubyte.gz";
  const std::string labels = std::string(kFashionDir) + "/t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(images) || !std::filesystem::exists(labels))
    GTEST_SKIP() << "Fashion-MNIST not found in " << kFashionDir << " (install the dataset-fashion-mnist package)";
  const ImageDataset ds = load_image_dataset(images, labels, Normalization{});
  EXPECT_EQ(ds.count, 10000);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.height, 28);
  EXPECT_EQ(ds.width, 28);
  EXPECT_EQ(ds.num_classes, 10);
  ASSERT_EQ(ds.labels.size(), 10000u);
  EXPECT_EQ(std::vector<int32_t>(ds.labels.begin(), ds.labels.begin() + 10),
            (std::vector<int32_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  ASSERT_EQ(ds.pixels.size(), 10000u * 784);
  const auto [lo, hi] = std::minmax_element(ds.pixels.begin(), ds.pixels.end());
  EXPECT_GE(*lo, 0.0f);
  EXPECT_LE(*hi, 1.0f);
  EXPECT_GT(*hi, 0.5f);  // not all black: the bytes were actually decoded
}

TEST(FashionMnist, TrainSetLoads) {
  const std::string images = std::string(kFashionDir) + "/train-images-idx3-ubyte.gz";
  const std::string labels = std::string(kFashionDir) + "/train-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(images) || !std::filesystem::exists(labels))
    GTEST_SKIP() << "Fashion-MNIST not found in " << kFashionDir << " (install the dataset-fashion-mnist package)";
  const ImageDataset ds = load_image_dataset(images, labels, Normalization{});
  EXPECT_EQ(ds.count, 60000);
  EXPECT_EQ(ds.num_classes, 10);
  // Fashion-MNIST train is balanced: 6000 of each class.
  std::vector<int> per_class(10);
  for (int32_t l : ds.labels) ++per_class[l];
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));
}

TEST(SyntheticImageDataset, DeterministicShapedAndLabelled) {
  const ImageDataset a = synthetic_image_dataset(50, 2, 3, 4, 5, 11);
  const ImageDataset b = synthetic_image_dataset(50, 2, 3, 4, 5, 11);
  const ImageDataset c = synthetic_image_dataset(50, 2, 3, 4, 5, 12);
  EXPECT_EQ(a.count, 50);
  EXPECT_EQ(a.sample_numel(), 24);
  EXPECT_EQ(a.num_classes, 5);
  EXPECT_EQ(a.pixels.size(), 50u * 24);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.pixels, c.pixels);
  for (int32_t l : a.labels) {
    EXPECT_GE(l, 0);
    EXPECT_LT(l, 5);
  }
  EXPECT_GT(std::set<int32_t>(a.labels.begin(), a.labels.end()).size(), 3u);
  EXPECT_THROW(synthetic_image_dataset(0, 1, 1, 1, 2, 0), Error);
  EXPECT_THROW(synthetic_image_dataset(4, 1, 1, 1, 0, 0), Error);
}

// The classes must be learnable: nearest class mean classifies most samples.
TEST(SyntheticImageDataset, ClassesAreSeparable) {
  const int32_t classes = 4;
  const ImageDataset ds = synthetic_image_dataset(400, 1, 4, 4, classes, 3);
  const int64_t numel = ds.sample_numel();
  std::vector<double> mean(classes * numel, 0.0);
  std::vector<int> n(classes, 0);
  for (int64_t i = 0; i < ds.count; ++i) {
    ++n[ds.labels[i]];
    for (int64_t j = 0; j < numel; ++j) mean[ds.labels[i] * numel + j] += ds.pixels[i * numel + j];
  }
  for (int32_t k = 0; k < classes; ++k)
    for (int64_t j = 0; j < numel; ++j) mean[k * numel + j] /= std::max(n[k], 1);
  int correct = 0;
  for (int64_t i = 0; i < ds.count; ++i) {
    int best = 0;
    double best_d = 1e300;
    for (int32_t k = 0; k < classes; ++k) {
      double d = 0;
      for (int64_t j = 0; j < numel; ++j) d += std::pow(ds.pixels[i * numel + j] - mean[k * numel + j], 2);
      if (d < best_d) {
        best_d = d;
        best = k;
      }
    }
    correct += best == ds.labels[i];
  }
  EXPECT_GT(correct, 380);
}

}  // namespace
}  // namespace gradmesh::data
