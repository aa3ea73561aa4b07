// Encoded images (JPEG through libjpeg-turbo, PNG through libspng) to and
// from 8-bit pixels laid out channels first (C, H, W), as IDX sets, MDS
// "ndarray:uint8:C,H,W" columns and PyTorch tensors lay them out. A grey
// image decodes to one channel, anything else to three (RGB; alpha and
// palettes resolved by the decoder), so the loader never guesses a layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::data {

enum class ImageFormat { kUnknown, kJpeg, kPng };

// From the first bytes (JPEG's FF D8 FF, PNG's 8-byte signature).
ImageFormat sniff_image(std::string_view bytes);
const char* image_format_name(ImageFormat format);  // "jpeg", "png", "unknown"

struct ImageSize {
  int64_t channels = 0, height = 0, width = 0;
  bool operator==(const ImageSize&) const = default;
};

// Images larger than this on a side are refused as hostile (a 65,500-pixel
// JPEG header would ask for gigabytes).
inline constexpr int64_t kMaxImageSide = 16384;

// Decodes `bytes` into `pixels` (resized to C*H*W, reused across calls).
// Error(kFormat) naming `where` for data that is not a complete JPEG or PNG,
// a side over kMaxImageSide, or a bit depth other than 8 (PNG's 16-bit
// samples are refused rather than silently rounded).
ImageSize decode_image(std::string_view bytes, std::vector<uint8_t>& pixels, const std::string& where);

// The header alone: size and channels as decode_image would return them.
ImageSize peek_image(std::string_view bytes, const std::string& where);

// Encodes C*H*W pixels (C = 1 or 3) as a baseline JPEG of `quality` (1-100)
// or as a PNG. Error(kUsage) for another channel count.
std::string encode_jpeg(const uint8_t* pixels, const ImageSize& size, int quality);
std::string encode_png(const uint8_t* pixels, const ImageSize& size);

}  // namespace gradmesh::data
