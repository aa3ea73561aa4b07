// Writing image sets as MDS shards (gradmesh data prepare): from IDX files
// today; each sample is the image's pixels, channels first ("x",
// ndarray:uint8:C,H,W), and its class ("y", int), as ShardedImages reads them.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::data {

struct PreparedSet {
  int64_t samples = 0;
  size_t shards = 0;
  int64_t bytes = 0;  // of the shards
};

// Reads the IDX images ([N, H, W] or [N, C, H, W]) and labels ([N]) and
// writes them to `output` in shards of at most `shard_bytes`. Errors as
// read_idx (naming the file), kFormat when the two files disagree on N,
// kUsage when `output` already holds a set (index.json), kIo when it cannot be written.
PreparedSet prepare_images_from_idx(const std::string& images, const std::string& labels, const std::string& output,
                                    int64_t shard_bytes);

}  // namespace gradmesh::data
