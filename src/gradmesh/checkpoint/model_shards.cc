#include "gradmesh/checkpoint/model_shards.h"

#include <cstring>

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::checkpoint {
namespace {

std::vector<NamedTensor> joined_shards(const LoadedCheckpoint& checkpoint, const std::vector<std::string>& files) {
  std::vector<std::pair<std::string, Shape>> params;
  std::string params_text;
  Tensor whole;
  std::vector<ElementRange> covered;
  for (const std::string& file : files) {
    const SafetensorsFile f = checkpoint.read_tensor_file(file);
    const std::string source = checkpoint.path + "/" + file;
    const std::string& text = required_metadata(f, "params", source);
    if (!whole.defined()) {
      params = parse_param_shapes(text, source);
      params_text = text;
      int64_t numel = 0;
      for (const auto& [name, shape] : params) numel += shape_numel(shape);
      whole = Tensor::zeros({numel});
    } else if (text != params_text) {
      throw_error(ErrorKind::kFormat, source,
                  "metadata 'params' differs from " + files.front() + "'s: the shards are of different models");
    }
    const std::vector<ElementRange> ranges = parse_ascending_ranges(required_metadata(f, "ranges", source), source);
    int64_t total = 0;
    for (const ElementRange& r : ranges) total += r.count;
    if (f.tensors.size() != 1 || f.tensors[0].name != "weights" || f.tensors[0].tensor.dtype() != DType::kF32 ||
        f.tensors[0].tensor.numel() != total)
      throw_error(ErrorKind::kFormat, source,
                  "expected one F32 tensor 'weights' of " + std::to_string(total) +
                      " elements (the sum of metadata 'ranges')");
    const float* values = f.tensors[0].tensor.data();
    for (const ElementRange& r : ranges) {
      if (r.begin + r.count > whole.numel())
        throw_error(ErrorKind::kFormat, source,
                    "metadata 'ranges': " + ranges_text({r}) + " ends beyond the model's " +
                        std::to_string(whole.numel()) + " elements");
      std::memcpy(whole.data() + r.begin, values, static_cast<size_t>(r.count) * sizeof(float));
      values += r.count;
      covered.push_back(r);
    }
  }
  check_ranges_tile(covered, whole.numel(), checkpoint.path + ": model shards");
  std::vector<NamedTensor> out;
  int64_t offset = 0;
  for (const auto& [name, shape] : params) {
    out.push_back({name, whole.slice_flat(offset, shape)});
    offset += shape_numel(shape);
  }
  return out;
}

}  // namespace

std::string param_shapes_text(const std::vector<std::pair<std::string, Shape>>& params) {
  std::string out;
  for (const auto& [name, shape] : params) {
    out += (out.empty() ? "" : ",") + name + ":";
    for (size_t d = 0; d < shape.size(); ++d) out += (d ? "x" : "") + std::to_string(shape[d]);
  }
  return out;
}

std::vector<std::pair<std::string, Shape>> parse_param_shapes(const std::string& text, const std::string& source) {
  std::vector<std::pair<std::string, Shape>> params;
  size_t begin = 0;
  while (begin <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string entry = text.substr(begin, comma - begin);
    const size_t colon = entry.rfind(':');
    auto bad = [&](const std::string& why) {
      throw_error(ErrorKind::kFormat, source, "metadata 'params': '" + entry + "' " + why);
    };
    if (colon == std::string::npos || colon == 0) bad("is not <name>:<d0>x<d1>...");
    Shape shape;
    const std::string dims = entry.substr(colon + 1);
    size_t at = 0;
    while (!dims.empty() && at <= dims.size()) {
      const size_t x = std::min(dims.find('x', at), dims.size());
      const std::optional<int64_t> d = try_parse_int(dims.substr(at, x - at), 1, int64_t{1} << 40);
      if (!d) bad("has a dimension that is not an integer from 1 to 2^40");
      shape.push_back(*d);
      at = x + 1;
    }
    if (shape.size() > 8) bad("has more than 8 dimensions");
    params.emplace_back(entry.substr(0, colon), shape);
    begin = comma + 1;
  }
  if (params.empty()) throw_error(ErrorKind::kFormat, source, "metadata 'params' names no parameter");
  return params;
}

TensorFile model_shard_file(int index, int count, int rank, const std::vector<ElementRange>& ranges,
                            const Tensor& values, const std::vector<std::pair<std::string, Shape>>& params,
                            std::map<std::string, std::string> metadata) {
  TensorFile file;
  file.name = shard_file_name(kModelShardOf, index, count);
  file.rank = rank;
  file.tensors = copy_tensors({{"weights", values}});
  metadata["ranges"] = ranges_text(ranges);
  metadata["params"] = param_shapes_text(params);
  file.metadata = std::move(metadata);
  return file;
}

bool has_model_shards(const LoadedCheckpoint& checkpoint) { return !shard_set(checkpoint, kModelShardOf).empty(); }

std::vector<NamedTensor> read_model_weights(const LoadedCheckpoint& checkpoint) {
  const bool whole = checkpoint.manifest.find(kModelFileName) != nullptr;
  const std::vector<std::string> shards = shard_set(checkpoint, kModelShardOf);
  if (whole && !shards.empty())
    throw_error(ErrorKind::kFormat, checkpoint.path,
                std::string("holds both ") + kModelFileName + " and model shards; expected one of the two");
  if (!shards.empty()) return joined_shards(checkpoint, shards);
  if (!whole)
    throw_error(ErrorKind::kFormat, checkpoint.path,
                std::string("holds no weights (neither ") + kModelFileName + " nor " +
                    shard_file_name(kModelShardOf, 1, 1) + " ...)");
  return checkpoint.read_tensor_file(kModelFileName).tensors;
}

}  // namespace gradmesh::checkpoint
