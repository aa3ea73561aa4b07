#include "gradmesh/data/image_augment.h"

#include <algorithm>

#include "gradmesh/core/rng.h"

namespace gradmesh::data {

AugmentDraw draw_augment(const ImageAugment& augment, int64_t epoch, int64_t sample) {
  AugmentDraw d;
  if (!augment.active()) return d;
  const PhiloxBlock words =
      CounterRng(augment.seed, RngPurpose::kAugment, static_cast<uint64_t>(epoch)).block(static_cast<uint64_t>(sample));
  // 32-bit multiply-shift into [0, n): bias below n / 2^32, immaterial for a padding of a few pixels.
  const auto pick = [](uint32_t word, int64_t n) {
    return static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(n)) >> 32);
  };
  if (augment.crop_padding > 0) {
    d.top = pick(words[0], 2 * augment.crop_padding + 1);
    d.left = pick(words[1], 2 * augment.crop_padding + 1);
  } else {
    d.top = d.left = 0;
  }
  d.flip = augment.flip && (words[2] & 1u) != 0;
  return d;
}

void augment_and_normalise(const uint8_t* pixels, const Shape& chw, const std::array<float, 256>& table,
                           const ImageAugment& augment, int64_t epoch, int64_t sample, float* out) {
  const int64_t channels = chw[0], height = chw[1], width = chw[2];
  if (!augment.active()) {
    for (int64_t i = 0; i < channels * height * width; ++i) out[i] = table[pixels[i]];
    return;
  }
  const AugmentDraw d = draw_augment(augment, epoch, sample);
  // Output (y, x) reads padded (y + top, x' + left), x' mirrored when flipped;
  // padded (py, px) is source (py - pad, px - pad), outside it a zero pixel.
  const int64_t dy = d.top - augment.crop_padding, dx = d.left - augment.crop_padding;
  const float zero = table[0];
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = pixels + c * height * width;
    float* dst = out + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = y + dy;
      float* row = dst + y * width;
      if (sy < 0 || sy >= height) {
        for (int64_t x = 0; x < width; ++x) row[x] = zero;
        continue;
      }
      // Source column sx = x + dx (flipped: width - 1 - x + dx) lies inside
      // the row for x in [x0, x1); outside it the padding's zero. The loops
      // below have no branch per pixel.
      const int64_t base = d.flip ? width - 1 + dx : dx;
      // (A padding wider than the image can leave the range empty.)
      const int64_t x0 = std::clamp<int64_t>(d.flip ? base - (width - 1) : -dx, 0, width);
      const int64_t x1 = std::clamp<int64_t>(d.flip ? base + 1 : width - dx, x0, width);
      const uint8_t* src = plane + sy * width;
      for (int64_t x = 0; x < x0; ++x) row[x] = zero;
      if (d.flip)
        for (int64_t x = x0; x < x1; ++x) row[x] = table[src[base - x]];
      else
        for (int64_t x = x0; x < x1; ++x) row[x] = table[src[base + x]];
      for (int64_t x = x1; x < width; ++x) row[x] = zero;
    }
  }
}

}  // namespace gradmesh::data
