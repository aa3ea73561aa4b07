#include "gradmesh/data/image_codec.h"

#include <spng.h>
#include <turbojpeg.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "gradmesh/core/error.h"

namespace gradmesh::data {
namespace {

[[noreturn]] void corrupt(const std::string& where, const std::string& what) {
  throw_error(ErrorKind::kFormat, where, what);
}

// One TurboJPEG handle per thread and direction: creating one allocates, and
// a handle may not be shared between threads.
struct TjHandle {
  explicit TjHandle(bool compress) : h(compress ? tjInitCompress() : tjInitDecompress()) {}
  ~TjHandle() {
    if (h != nullptr) tjDestroy(h);
  }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  tjhandle h;
};

// This thread's decompressor. A handle that failed on a damaged file can
// misread the next one (TurboJPEG 2.1 keeps state from the failed header),
// so a failure replaces it.
TjHandle& decompressor_handle() {
  thread_local TjHandle handle(false);
  return handle;
}

tjhandle decompressor() {
  TjHandle& handle = decompressor_handle();
  if (handle.h == nullptr) handle.h = tjInitDecompress();
  GRADMESH_CHECK(handle.h != nullptr, "tjInitDecompress failed");
  return handle.h;
}

[[noreturn]] void jpeg_failed(const std::string& where, const std::string& what) {
  TjHandle& handle = decompressor_handle();
  const std::string reason = what + tjGetErrorStr2(handle.h);
  tjDestroy(handle.h);
  handle.h = nullptr;
  corrupt(where, reason);
}

void check_side(int64_t height, int64_t width, const std::string& where) {
  if (height < 1 || width < 1 || height > kMaxImageSide || width > kMaxImageSide)
    corrupt(where, "image is " + std::to_string(width) + "x" + std::to_string(height) + "; sides of 1 to " +
                       std::to_string(kMaxImageSide) + " pixels are read");
}

ImageSize jpeg_header(std::string_view bytes, const std::string& where, int& colorspace) {
  int width = 0, height = 0, subsampling = 0;
  if (tjDecompressHeader3(decompressor(), reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<unsigned long>(bytes.size()), &width, &height, &subsampling, &colorspace) != 0)
    jpeg_failed(where, "not a readable JPEG: ");
  check_side(height, width, where);
  return {colorspace == TJCS_GRAY ? 1 : 3, height, width};
}

ImageSize decode_jpeg(std::string_view bytes, std::vector<uint8_t>& pixels, const std::string& where) {
  int colorspace = 0;
  const ImageSize size = jpeg_header(bytes, where, colorspace);
  const auto plane = static_cast<size_t>(size.height * size.width);
  thread_local std::vector<uint8_t> interleaved;
  interleaved.resize(plane * static_cast<size_t>(size.channels));
  // TJFLAG_STOPONWARNING: a truncated or damaged JPEG is an error, not a grey tail.
  if (tjDecompress2(decompressor(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    static_cast<unsigned long>(bytes.size()), interleaved.data(), static_cast<int>(size.width), 0,
                    static_cast<int>(size.height), size.channels == 1 ? TJPF_GRAY : TJPF_RGB,
                    TJFLAG_STOPONWARNING) != 0)
    jpeg_failed(where, "JPEG does not decode: ");
  pixels.resize(interleaved.size());
  if (size.channels == 1) {
    std::memcpy(pixels.data(), interleaved.data(), plane);
  } else {
    for (size_t p = 0; p < plane; ++p)
      for (size_t c = 0; c < 3; ++c) pixels[c * plane + p] = interleaved[p * 3 + c];
  }
  return size;
}

struct SpngContext {
  explicit SpngContext(int flags) : ctx(spng_ctx_new(flags)) {}
  ~SpngContext() {
    if (ctx != nullptr) spng_ctx_free(ctx);
  }
  SpngContext(const SpngContext&) = delete;
  SpngContext& operator=(const SpngContext&) = delete;
  spng_ctx* ctx;
};

void spng_ok(int status, const std::string& where, const char* what) {
  if (status != 0) corrupt(where, std::string(what) + ": " + spng_strerror(status));
}

// The PNG's header, and the decoder output format: grey stays one channel
// (its alpha dropped), everything else becomes RGB.
ImageSize png_header(SpngContext& png, std::string_view bytes, const std::string& where, spng_format& format) {
  GRADMESH_CHECK(png.ctx != nullptr, "spng_ctx_new failed");
  // Decompressed size and chunk limits keep a hostile file from asking for gigabytes.
  spng_set_image_limits(png.ctx, static_cast<uint32_t>(kMaxImageSide), static_cast<uint32_t>(kMaxImageSide));
  spng_set_chunk_limits(png.ctx, 1u << 24, 1u << 26);
  spng_ok(spng_set_png_buffer(png.ctx, bytes.data(), bytes.size()), where, "not a readable PNG");
  spng_ihdr ihdr{};
  spng_ok(spng_get_ihdr(png.ctx, &ihdr), where, "not a readable PNG");
  check_side(ihdr.height, ihdr.width, where);
  if (ihdr.bit_depth > 8)
    corrupt(where, "PNG has " + std::to_string(ihdr.bit_depth) + "-bit samples; 8-bit (or fewer) images are read");
  const bool grey = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE || ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
  format = grey ? (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ? SPNG_FMT_G8 : SPNG_FMT_GA8) : SPNG_FMT_RGB8;
  return {grey ? 1 : 3, ihdr.height, ihdr.width};
}

ImageSize decode_png(std::string_view bytes, std::vector<uint8_t>& pixels, const std::string& where) {
  SpngContext png(0);
  spng_format format = SPNG_FMT_RGB8;
  const ImageSize size = png_header(png, bytes, where, format);
  size_t out_bytes = 0;
  spng_ok(spng_decoded_image_size(png.ctx, format, &out_bytes), where, "PNG does not decode");
  thread_local std::vector<uint8_t> interleaved;
  interleaved.resize(out_bytes);
  spng_ok(spng_decode_image(png.ctx, interleaved.data(), out_bytes, format, SPNG_DECODE_TRNS), where,
          "PNG does not decode");
  const auto plane = static_cast<size_t>(size.height * size.width);
  const size_t stride = format == SPNG_FMT_G8 ? 1 : (format == SPNG_FMT_GA8 ? 2 : 3);
  if (out_bytes != plane * stride) corrupt(where, "PNG decodes to an unexpected size");
  pixels.resize(plane * static_cast<size_t>(size.channels));
  for (size_t p = 0; p < plane; ++p)
    for (size_t c = 0; c < static_cast<size_t>(size.channels); ++c) pixels[c * plane + p] = interleaved[p * stride + c];
  return size;
}

// Channels first (C, H, W) to the encoders' interleaved (H, W, C).
std::vector<uint8_t> interleave(const uint8_t* pixels, const ImageSize& size, const char* what) {
  if (size.channels != 1 && size.channels != 3)
    throw_error(ErrorKind::kUsage, what, "1 or 3 channels, not " + std::to_string(size.channels));
  const auto plane = static_cast<size_t>(size.height * size.width), channels = static_cast<size_t>(size.channels);
  std::vector<uint8_t> interleaved(plane * channels);
  for (size_t p = 0; p < plane; ++p)
    for (size_t c = 0; c < channels; ++c) interleaved[p * channels + c] = pixels[c * plane + p];
  return interleaved;
}

}  // namespace

ImageFormat sniff_image(std::string_view bytes) {
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
      static_cast<unsigned char>(bytes[1]) == 0xD8 && static_cast<unsigned char>(bytes[2]) == 0xFF)
    return ImageFormat::kJpeg;
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "jpeg";
    case ImageFormat::kPng: return "png";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageSize decode_image(std::string_view bytes, std::vector<uint8_t>& pixels, const std::string& where) {
  switch (sniff_image(bytes)) {
    case ImageFormat::kJpeg: return decode_jpeg(bytes, pixels, where);
    case ImageFormat::kPng: return decode_png(bytes, pixels, where);
    case ImageFormat::kUnknown: break;
  }
  corrupt(where, "neither a JPEG nor a PNG (" + std::to_string(bytes.size()) + " bytes, no known signature)");
}

ImageSize peek_image(std::string_view bytes, const std::string& where) {
  switch (sniff_image(bytes)) {
    case ImageFormat::kJpeg: {
      int colorspace = 0;
      return jpeg_header(bytes, where, colorspace);
    }
    case ImageFormat::kPng: {
      SpngContext png(0);
      spng_format format = SPNG_FMT_RGB8;
      return png_header(png, bytes, where, format);
    }
    case ImageFormat::kUnknown: break;
  }
  corrupt(where, "neither a JPEG nor a PNG (" + std::to_string(bytes.size()) + " bytes, no known signature)");
}

std::string encode_jpeg(const uint8_t* pixels, const ImageSize& size, int quality) {
  const std::vector<uint8_t> interleaved = interleave(pixels, size, "encode_jpeg");
  thread_local TjHandle handle(true);
  GRADMESH_CHECK(handle.h != nullptr, "tjInitCompress failed");
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  const int status = tjCompress2(handle.h, interleaved.data(), static_cast<int>(size.width), 0,
                                 static_cast<int>(size.height), size.channels == 1 ? TJPF_GRAY : TJPF_RGB, &out,
                                 &out_size, size.channels == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(out, [](unsigned char* p) { tjFree(p); });
  if (status != 0) throw_error(ErrorKind::kInternal, "encode_jpeg", tjGetErrorStr2(handle.h));
  return std::string(reinterpret_cast<const char*>(out), out_size);
}

std::string encode_png(const uint8_t* pixels, const ImageSize& size) {
  const std::vector<uint8_t> interleaved = interleave(pixels, size, "encode_png");
  SpngContext png(SPNG_CTX_ENCODER);
  GRADMESH_CHECK(png.ctx != nullptr, "spng_ctx_new failed");
  spng_set_option(png.ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(size.width);
  ihdr.height = static_cast<uint32_t>(size.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = size.channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR;
  spng_set_ihdr(png.ctx, &ihdr);
  const int status =
      spng_encode_image(png.ctx, interleaved.data(), interleaved.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  if (status != 0) throw_error(ErrorKind::kInternal, "encode_png", spng_strerror(status));
  size_t out_size = 0;
  int error = 0;
  void* out = spng_get_png_buffer(png.ctx, &out_size, &error);
  if (out == nullptr) throw_error(ErrorKind::kInternal, "encode_png", spng_strerror(error));
  std::string result(static_cast<const char*>(out), out_size);
  free(out);
  return result;
}

}  // namespace gradmesh::data
