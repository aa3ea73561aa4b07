#include "gradmesh/data/prepare_images.h"

#include <filesystem>
#include <string_view>

#include "gradmesh/core/error.h"
#include "gradmesh/data/idx.h"
#include "gradmesh/data/mds.h"

namespace gradmesh::data {

PreparedSet prepare_images_from_idx(const std::string& images, const std::string& labels, const std::string& output,
                                    int64_t shard_bytes) {
  if (std::filesystem::exists(std::filesystem::path(output) / "index.json"))
    throw_error(ErrorKind::kUsage, output, "already holds a set (index.json); choose another --output or remove it");
  const IdxArray x = read_idx(images);
  const IdxArray y = read_idx(labels);
  if (x.dims.size() != 3 && x.dims.size() != 4)
    throw_error(ErrorKind::kFormat, images, "images must be [N, H, W] or [N, C, H, W], got " + idx_dims_str(x.dims));
  if (y.dims.size() != 1)
    throw_error(ErrorKind::kFormat, labels, "labels must be [N], got " + idx_dims_str(y.dims));
  if (x.dims[0] != y.dims[0])
    throw_error(ErrorKind::kFormat, images, "holds " + std::to_string(x.dims[0]) + " images but " + labels + " holds " +
                                                std::to_string(y.dims[0]) + " labels");
  const int64_t count = x.dims[0];
  const int64_t channels = x.dims.size() == 4 ? x.dims[1] : 1;
  const int64_t height = x.dims[x.dims.size() - 2], width = x.dims.back();
  const std::string shape = std::to_string(channels) + "," + std::to_string(height) + "," + std::to_string(width);
  MdsWriter writer(output, {{"x", "ndarray:uint8:" + shape, std::nullopt}, {"y", "int", std::nullopt}}, shard_bytes);
  const auto per_image = static_cast<size_t>(channels * height * width);
  // The writer orders the columns by name: "x" then "y".
  for (int64_t i = 0; i < count; ++i) {
    const auto* pixels = reinterpret_cast<const char*>(x.values.data()) + static_cast<size_t>(i) * per_image;
    char label[8] = {static_cast<char>(y.values[static_cast<size_t>(i)]), 0, 0, 0, 0, 0, 0, 0};  // int64, little endian
    writer.add({std::string_view(pixels, per_image), std::string_view(label, sizeof label)});
  }
  PreparedSet result;
  result.samples = writer.finish();
  const MdsReader check(output);  // what was written reads back: sizes and sample counts match index.json
  result.shards = check.shards().size();
  for (const MdsShardInfo& s : check.shards()) result.bytes += s.bytes;
  return result;
}

}  // namespace gradmesh::data
