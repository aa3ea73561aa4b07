// Training-time image augmentation as torchvision's RandomCrop(size,
// padding) and RandomHorizontalFlip() do it, fused with the normalisation
// the loader applies anyway: one pass from 8-bit pixels to the batch's floats.
// Every random choice is a counter-RNG draw keyed by (seed, epoch, sample),
// so a sample looks the same on any number of ranks or loader threads and
// after a resume.
#pragma once

#include <array>
#include <cstdint>

#include "gradmesh/core/tensor.h"

namespace gradmesh::data {

struct ImageAugment {
  int64_t crop_padding = 0;  // > 0: pad each side with zeros by this much, crop back to the size at a random offset
  bool flip = false;         // mirror left-right with probability 1/2
  uint64_t seed = 0;
  bool active() const { return crop_padding > 0 || flip; }
};

// The choices for one sample: the crop's top-left corner in the padded image
// (each in [0, 2 * crop_padding]) and whether it is mirrored.
struct AugmentDraw {
  int64_t top = 0, left = 0;
  bool flip = false;
};
AugmentDraw draw_augment(const ImageAugment& augment, int64_t epoch, int64_t sample);

// Writes C*H*W floats to `out`: table[pixel] of the chosen crop and flip of
// `pixels` (C*H*W bytes, channels first); padding becomes table[0], as a
// zero pixel normalised. With !augment.active() this is plain normalisation.
void augment_and_normalise(const uint8_t* pixels, const Shape& chw, const std::array<float, 256>& table,
                           const ImageAugment& augment, int64_t epoch, int64_t sample, float* out);

}  // namespace gradmesh::data
