// The safetensors format, as Hugging Face specifies it, for model weights.
//
// Layout of a file:
//   bytes [0, 8)        N: the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    a UTF-8 JSON object, optionally padded with spaces:
//                         {"__metadata__": {"key": "value", ...},       (optional)
//                          "<name>": {"dtype": "F32", "shape": [out, in],
//                                     "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF)  the data buffer; data_offsets are relative to its
//                       start, tensors are row-major little-endian and
//                       together cover the buffer exactly.
//
// The writer emits what the reference implementation (and so PyTorch's
// safetensors.torch.save_file) emits: compact JSON with "__metadata__" first
// and the fields of each entry in the order dtype, shape, data_offsets, the
// header padded with spaces to a multiple of 8 bytes so every tensor starts
// 8-byte aligned. The one difference is tensor order: the reference sorts by
// dtype and name, we keep the caller's order (a PyTorch state_dict's order),
// which every reader accepts.
//
// The reader validates everything before allocating tensor memory, so a
// corrupt or hostile file costs at most its own size in memory and ends in a
// gradmesh::Error, never in a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gradmesh/core/tensor.h"

namespace gradmesh::checkpoint {

// The reference implementation refuses larger headers; so do we, which also
// bounds the memory a corrupt length prefix can make us allocate.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct NamedTensor {
  std::string name;  // PyTorch state_dict style: "1.weight", "fc1.bias"
  Tensor tensor;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;             // in data-buffer (offset) order
  std::map<std::string, std::string> metadata;  // the "__metadata__" object, empty if absent

  // Linear search; nullptr if no tensor has that name.
  const Tensor* find(const std::string& name) const;
};

// The metadata value under `key`; Error(kFormat) "<source>: metadata '<key>'
// is missing" when there is none.
const std::string& required_metadata(const SafetensorsFile& file, const std::string& key, const std::string& source);

// Writes `tensors` (in the given order, data contiguous in that order) and
// `metadata` to `path` via write_file_atomically: a crash leaves either the
// old file or the new one. With `store_dtype` kBF16, float32 tensors are
// rounded to bf16 (nearest even) on the way out; tensors that already are
// bf16 are stored as they are whatever `store_dtype` says.
// REQUIRES: every tensor defined; names unique, non-empty, valid UTF-8 and
// not "__metadata__" (violations throw Error(kInternal): a caller bug).
// I/O failures throw Error(kIo) naming `path`.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, DType store_dtype = DType::kF32);

// Receives a file's bytes in order, in pieces of any size.
using ByteSink = std::function<void(const void* data, size_t size)>;

// Produces exactly the bytes write_safetensors writes, through `sink`, for
// writers that hash or place the file themselves (the checkpoint commit).
// Same REQUIRES as write_safetensors, checked before the first byte reaches
// `sink`; `path` only names the file in those errors.
void encode_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata, DType store_dtype, const ByteSink& sink);

// Reads and validates a whole file; tensors keep their stored dtype (F32 or
// BF16). A missing or unreadable file is Error(kIo); any malformed content is
// Error(kFormat) whose message starts with `path` and says what was wrong and
// what was expected. Duplicate keys in the header are rejected.
SafetensorsFile read_safetensors(const std::string& path);

// Same as read_safetensors, from a complete file image already in memory.
// `source` names the origin in error messages.
SafetensorsFile parse_safetensors(const std::string& source, const uint8_t* bytes, size_t size);

// A listing for `gradmesh inspect`: a table with one line per tensor (name,
// dtype, shape, elements, bytes, min/max/mean over finite values and a count
// of non-finite ones), then the metadata, then a total line.
std::string describe_safetensors(const SafetensorsFile& file);

}  // namespace gradmesh::checkpoint
