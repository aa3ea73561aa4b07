// JPEG and PNG decoding (data/image_codec.h) and the loader's augmentation
// (data/image_augment.h): PNG round-trips exactly, JPEG closely, channels
// come out first; damaged, truncated, oversized or foreign bytes are errors
// naming where they came from, never a crash (a seeded fuzz pass runs under
// ASan in CI); crops and flips are torchvision's, drawn per (seed, epoch,
// sample) and nothing else.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/data/image_augment.h"
#include "gradmesh/data/image_codec.h"

namespace gradmesh::data {
namespace {

// C*H*W test pixels: smooth, so JPEG keeps them within a few levels.
std::vector<uint8_t> gradient(const ImageSize& s) {
  std::vector<uint8_t> p(static_cast<size_t>(s.channels * s.height * s.width));
  for (int64_t c = 0; c < s.channels; ++c)
    for (int64_t y = 0; y < s.height; ++y)
      for (int64_t x = 0; x < s.width; ++x)
        p[static_cast<size_t>((c * s.height + y) * s.width + x)] = static_cast<uint8_t>(20 + 2 * x + 2 * y + 30 * c);
  return p;
}

std::string error_of(const std::string& bytes) {
  std::vector<uint8_t> out;
  try {
    decode_image(bytes, out, "shard.00003.mds: sample 17");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    return e.what();
  }
  return "";
}

TEST(ImageCodec, PngRoundTripsExactlyGreyAndRgbChannelsFirst) {
  for (const ImageSize size : {ImageSize{1, 7, 9}, ImageSize{3, 5, 4}}) {
    const std::vector<uint8_t> pixels = gradient(size);
    const std::string png = encode_png(pixels.data(), size);
    EXPECT_EQ(sniff_image(png), ImageFormat::kPng);
    std::vector<uint8_t> back;
    EXPECT_EQ(decode_image(png, back, "t"), size);
    EXPECT_EQ(back, pixels);
    EXPECT_EQ(peek_image(png, "t"), size);
  }
}

TEST(ImageCodec, JpegDecodesCloseToWhatWasEncoded) {
  for (const ImageSize size : {ImageSize{1, 28, 28}, ImageSize{3, 16, 24}}) {
    const std::vector<uint8_t> pixels = gradient(size);
    const std::string jpeg = encode_jpeg(pixels.data(), size, 95);
    EXPECT_EQ(sniff_image(jpeg), ImageFormat::kJpeg);
    std::vector<uint8_t> back;
    ASSERT_EQ(decode_image(jpeg, back, "t"), size);
    int worst = 0;
    for (size_t i = 0; i < back.size(); ++i) worst = std::max(worst, std::abs(int{back[i]} - int{pixels[i]}));
    EXPECT_LE(worst, 12) << "channel-first order and colours survive a quality-95 JPEG";
  }
}

TEST(ImageCodec, TruncatedOrForeignBytesAreErrorsNamingTheSample) {
  const ImageSize size{1, 28, 28};
  const std::vector<uint8_t> pixels = gradient(size);
  const std::string jpeg = encode_jpeg(pixels.data(), size, 90), png = encode_png(pixels.data(), size);
  for (const std::string& bad : {jpeg.substr(0, jpeg.size() / 2), png.substr(0, png.size() - 20), std::string("GIF89a....."),
                                 std::string()}) {
    const std::string message = error_of(bad);
    EXPECT_NE(message.find("shard.00003.mds: sample 17"), std::string::npos) << message;
  }
  EXPECT_NE(error_of("GIF89a").find("neither a JPEG nor a PNG"), std::string::npos);
  // A decoder that failed on damaged bytes reads the next intact image right.
  std::vector<uint8_t> back;
  EXPECT_EQ(decode_image(jpeg, back, "t"), size);
}

TEST(ImageCodec, AHeaderAskingForAHugeImageIsRefusedBeforeDecoding) {
  const ImageSize size{1, 8, 8};
  const std::vector<uint8_t> pixels = gradient(size);
  std::string png = encode_png(pixels.data(), size);
  // IHDR's width (bytes 16..19, big endian) set to 100,000: 100,000 x 8 pixels.
  png[16] = 0;
  png[17] = 0x01;
  png[18] = static_cast<char>(0x86);
  png[19] = static_cast<char>(0xA0);
  EXPECT_FALSE(error_of(png).empty());
  std::string jpeg = encode_jpeg(pixels.data(), size, 90);
  // SOF0's height and width (after FF C0, length, precision) set to 65,000.
  const size_t sof = jpeg.find("\xFF\xC0", 0, 2);
  ASSERT_NE(sof, std::string::npos);
  for (size_t at : {sof + 5, sof + 7}) {
    jpeg[at] = static_cast<char>(0xFD);
    jpeg[at + 1] = static_cast<char>(0xE8);
  }
  EXPECT_NE(error_of(jpeg).find("sides of 1 to"), std::string::npos) << error_of(jpeg);
}

TEST(ImageCodec, RandomDamageIsAnErrorOrAnImageNeverACrash) {
  const ImageSize size{3, 12, 10};
  const std::vector<uint8_t> pixels = gradient(size);
  const std::string originals[] = {encode_jpeg(pixels.data(), size, 80), encode_png(pixels.data(), size)};
  std::mt19937 rng(2026);
  int errors = 0;
  for (int round = 0; round < 400; ++round) {
    std::string bytes = originals[round % 2];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (round % 5 == 0) bytes.resize(rng() % bytes.size());
    std::vector<uint8_t> out;
    try {
      const ImageSize got = decode_image(bytes, out, "fuzz");
      EXPECT_EQ(out.size(), static_cast<size_t>(got.channels * got.height * got.width));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
      ++errors;
    }
  }
  EXPECT_GT(errors, 50) << "damage is noticed, not decoded as if nothing happened";
}

std::array<float, 256> identity_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = static_cast<float>(i);
  return t;
}

// Paddings narrower and wider than the 5x6 image (a wide one can leave a row all padding).
TEST(ImageAugment, CropAndFlipAreTorchvisionsPadCropThenMirror) {
  const Shape chw = {2, 5, 6};
  std::vector<uint8_t> pixels(60);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i + 1);  // no pixel is 0
  for (const int64_t pad : {int64_t{2}, int64_t{9}}) {
    const ImageAugment augment{pad, true, 99};
    std::vector<float> out(61, -1.0f);  // one past the image: never written
    int flipped = 0;
    for (int64_t sample = 0; sample < 80; ++sample) {
      const AugmentDraw d = draw_augment(augment, 3, sample);
      ASSERT_GE(d.top, 0);
      ASSERT_LE(d.top, 2 * pad);
      ASSERT_GE(d.left, 0);
      ASSERT_LE(d.left, 2 * pad);
      flipped += d.flip;
      augment_and_normalise(pixels.data(), chw, identity_table(), augment, 3, sample, out.data());
      ASSERT_EQ(out[60], -1.0f) << "wrote past the image, sample " << sample;
      // The reference: pad with zeros, take the 5x6 window at (top, left), mirror it.
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t y = 0; y < 5; ++y)
          for (int64_t x = 0; x < 6; ++x) {
            const int64_t wx = d.flip ? 5 - x : x;
            const int64_t py = y + d.top - pad, px = wx + d.left - pad;
            const float want =
                py < 0 || py >= 5 || px < 0 || px >= 6 ? 0.0f : pixels[static_cast<size_t>((c * 5 + py) * 6 + px)];
            ASSERT_EQ(out[static_cast<size_t>((c * 5 + y) * 6 + x)], want) << "pad " << pad << " sample " << sample;
          }
    }
    EXPECT_GT(flipped, 20) << pad;
    EXPECT_LT(flipped, 60) << pad;
  }
}

TEST(ImageAugment, ADrawDependsOnSeedEpochAndSampleOnly) {
  const ImageAugment a{4, true, 7};
  int same_epoch_differs = 0, other_epoch_differs = 0, other_seed_differs = 0;
  for (int64_t s = 0; s < 64; ++s) {
    const AugmentDraw d = draw_augment(a, 1, s), again = draw_augment(a, 1, s);
    EXPECT_EQ(d.top, again.top);
    EXPECT_EQ(d.left, again.left);
    EXPECT_EQ(d.flip, again.flip);
    const AugmentDraw next = draw_augment(a, 1, s + 1), epoch = draw_augment(a, 2, s),
                      seed = draw_augment(ImageAugment{4, true, 8}, 1, s);
    same_epoch_differs += next.top != d.top || next.left != d.left;
    other_epoch_differs += epoch.top != d.top || epoch.left != d.left;
    other_seed_differs += seed.top != d.top || seed.left != d.left;
  }
  EXPECT_GT(same_epoch_differs, 40);
  EXPECT_GT(other_epoch_differs, 40);
  EXPECT_GT(other_seed_differs, 40);
}

TEST(ImageAugment, WithoutAugmentationItIsTheNormalisationTable) {
  const Shape chw = {1, 3, 3};
  const std::vector<uint8_t> pixels = {0, 1, 2, 3, 4, 5, 250, 254, 255};
  std::array<float, 256> table{};
  for (int i = 0; i < 256; ++i) table[static_cast<size_t>(i)] = (static_cast<float>(i) / 255.0f - 0.5f) / 0.25f;
  std::vector<float> out(9);
  augment_and_normalise(pixels.data(), chw, table, ImageAugment{}, 5, 11, out.data());
  for (size_t i = 0; i < 9; ++i) EXPECT_EQ(out[i], table[pixels[i]]);
}

}  // namespace
}  // namespace gradmesh::data
