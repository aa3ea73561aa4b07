#include "gradmesh/checkpoint/optimizer_state.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "gradmesh/checkpoint/manifest.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::checkpoint {
namespace {

// Every part, empty ones included ("a," is "a" and ""); "" has none.
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  if (text.empty()) return parts;
  size_t begin = 0;
  for (size_t at = text.find(sep); at != std::string::npos; at = text.find(sep, begin)) {
    parts.push_back(text.substr(begin, at - begin));
    begin = at + 1;
  }
  parts.push_back(text.substr(begin));
  return parts;
}

Tensor checked_step(const Tensor& t, const std::string& name, const std::string& source) {
  if (t.dtype() != DType::kF32 || t.numel() != 1)
    throw_error(ErrorKind::kFormat, source,
                "tensor '" + name + "' has dtype " + dtype_label(t.dtype()) + " and " + std::to_string(t.numel()) +
                    " elements; expected the F32 step counter of 1 element");
  return t;
}

// "state.<i>.<key>" -> (i, key); nullopt for another name.
std::optional<std::pair<int64_t, std::string>> per_parameter_name(const std::string& name) {
  if (name.rfind("state.", 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', 6);
  if (dot == std::string::npos || dot + 1 == name.size()) return std::nullopt;
  const std::optional<int64_t> index = try_parse_int(name.substr(6, dot - 6), 0, int64_t{1} << 31);
  if (!index) return std::nullopt;
  return std::make_pair(*index, name.substr(dot + 1));
}

void read_sharded(const SafetensorsFile& f, StoredOptimizerState& s) {
  const std::vector<ElementRange> ranges = parse_ascending_ranges(required_metadata(f, "ranges", s.source), s.source);
  int64_t total = 0;
  for (const ElementRange& r : ranges) total += r.count;
  for (const NamedTensor& t : f.tensors) {
    if (t.name == "step") {
      s.step = checked_step(t.tensor, t.name, s.source);
      continue;
    }
    if (t.tensor.dtype() != DType::kF32 || t.tensor.numel() != total)
      throw_error(ErrorKind::kFormat, s.source,
                  "tensor '" + t.name + "' has dtype " + dtype_label(t.tensor.dtype()) + " and " +
                      std::to_string(t.tensor.numel()) + " elements; expected F32 with " + std::to_string(total) +
                      " (the sum of metadata 'ranges')");
    std::vector<StatePiece>& pieces = s.pieces[t.name];
    int64_t at = 0;
    for (const ElementRange& r : ranges) {
      pieces.push_back({r.begin, t.tensor.slice_flat(at, {r.count})});
      at += r.count;
    }
  }
  if (!s.step.defined()) throw_error(ErrorKind::kFormat, s.source, "tensor 'step' is missing");
}

void read_whole(const SafetensorsFile& f, StoredOptimizerState& s) {
  std::map<std::string, std::map<int64_t, const Tensor*>> by_key;
  for (const NamedTensor& t : f.tensors) {
    const auto parsed = per_parameter_name(t.name);
    if (!parsed) throw_error(ErrorKind::kFormat, s.source, "tensor '" + t.name + "' is not named state.<i>.<key>");
    if (parsed->second == "step") {
      if (!s.step.defined()) s.step = checked_step(t.tensor, t.name, s.source);
      continue;
    }
    if (t.tensor.dtype() != DType::kF32)
      throw_error(ErrorKind::kFormat, s.source,
                  "tensor '" + t.name + "' has dtype " + dtype_label(t.tensor.dtype()) + "; expected F32");
    by_key[parsed->second][parsed->first] = &t.tensor;
  }
  if (!s.step.defined()) throw_error(ErrorKind::kFormat, s.source, "holds no state.<i>.step tensor");
  for (const auto& [key, tensors] : by_key) {
    const int64_t count = s.param_names.empty() ? static_cast<int64_t>(tensors.size())
                                                : static_cast<int64_t>(s.param_names.size());
    int64_t begin = 0;
    for (int64_t i = 0; i < count; ++i) {
      const auto it = tensors.find(i);
      if (it == tensors.end())
        throw_error(ErrorKind::kFormat, s.source,
                    "tensor 'state." + std::to_string(i) + "." + key + "'" +
                        (i < static_cast<int64_t>(s.param_names.size()) ? " (" + s.param_names[i] + ")" : "") +
                        " is missing");
      s.pieces[key].push_back({begin, it->second->view({it->second->numel()})});
      begin += it->second->numel();
    }
    if (tensors.size() != static_cast<size_t>(count))
      throw_error(ErrorKind::kFormat, s.source,
                  "holds " + std::to_string(tensors.size()) + " '" + key + "' tensors for " + std::to_string(count) +
                      " parameters");
  }
}

}  // namespace

std::string ranges_text(const std::vector<ElementRange>& ranges) {
  std::string out;
  for (const ElementRange& r : ranges)
    out += (out.empty() ? "" : ",") + std::to_string(r.begin) + "+" + std::to_string(r.count);
  return out;
}

std::vector<ElementRange> parse_ranges(const std::string& text, const std::string& source) {
  std::vector<ElementRange> ranges;
  for (const std::string& part : split(text, ',')) {
    const size_t plus = part.find('+');
    const std::optional<int64_t> begin =
        plus == std::string::npos ? std::nullopt : try_parse_int(part.substr(0, plus), 0, kInt64Max / 2);
    const std::optional<int64_t> count =
        plus == std::string::npos ? std::nullopt : try_parse_int(part.substr(plus + 1), 1, kInt64Max / 2);
    if (!begin || !count)
      throw_error(ErrorKind::kFormat, source,
                  "metadata 'ranges': '" + part + "' is not <begin>+<count> with begin >= 0 and count >= 1");
    ranges.push_back({*begin, *count});
  }
  return ranges;
}

std::vector<ElementRange> parse_ascending_ranges(const std::string& text, const std::string& source) {
  std::vector<ElementRange> ranges = parse_ranges(text, source);
  int64_t end = 0;
  for (const ElementRange& r : ranges) {
    if (r.begin < end)
      throw_error(ErrorKind::kFormat, source, "metadata 'ranges': " + ranges_text({r}) + " is not after the range before it");
    end = r.begin + r.count;
  }
  return ranges;
}

std::vector<std::string> optimizer_state_files(const LoadedCheckpoint& checkpoint) {
  const bool whole = checkpoint.manifest.find(kOptimizerFileName) != nullptr;
  std::vector<std::string> shards = shard_set(checkpoint, kOptimizerShardOf);
  if (whole && !shards.empty())
    throw_error(ErrorKind::kFormat, checkpoint.path,
                std::string("holds both ") + kOptimizerFileName + " and optimizer shards; expected one of the two");
  if (whole) return {kOptimizerFileName};
  if (shards.empty())
    throw_error(ErrorKind::kFormat, checkpoint.path,
                std::string("holds no optimizer state (neither ") + kOptimizerFileName + " nor " +
                    shard_file_name(kOptimizerShardOf, 1, 1) + " ...)");
  return shards;
}

StoredOptimizerState read_optimizer_state(const LoadedCheckpoint& checkpoint, const std::string& file) {
  const SafetensorsFile f = checkpoint.read_tensor_file(file);
  StoredOptimizerState s;
  s.source = checkpoint.path + "/" + file;
  s.optimizer = required_metadata(f, "optimizer", s.source);
  if (const auto names = f.metadata.find("param_names"); names != f.metadata.end())
    s.param_names = split(names->second, ',');
  if (parse_shard_file_name(file)) read_sharded(f, s);
  else read_whole(f, s);
  return s;
}

TensorFile optimizer_shard_file(int rank, int world_size, const std::vector<ElementRange>& ranges,
                                const std::vector<std::pair<std::string, Tensor>>& buffers, const Tensor& step,
                                std::map<std::string, std::string> metadata) {
  TensorFile file;
  file.name = shard_file_name(kOptimizerShardOf, rank + 1, world_size);
  file.rank = rank;
  std::vector<std::pair<std::string, Tensor>> views{{"step", step}};
  views.insert(views.end(), buffers.begin(), buffers.end());
  file.tensors = copy_tensors(views);
  metadata["ranges"] = ranges_text(ranges);
  file.metadata = std::move(metadata);
  return file;
}

void check_ranges_tile(std::vector<ElementRange> ranges, int64_t numel, const std::string& what) {
  std::sort(ranges.begin(), ranges.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  int64_t covered = 0;
  for (const ElementRange& r : ranges) {
    if (r.begin != covered)
      throw_error(ErrorKind::kFormat, what,
                  r.begin < covered ? "element range " + ranges_text({r}) + " overlaps another"
                                    : "elements " + std::to_string(covered) + " to " + std::to_string(r.begin - 1) +
                                          " are in no piece");
    covered += r.count;
  }
  if (covered != numel)
    throw_error(ErrorKind::kFormat, what,
                "covers " + std::to_string(covered) + " elements, but the model has " + std::to_string(numel) +
                    " parameter elements (a checkpoint of another model?)");
}

ConsolidatedOptimizerState consolidate_optimizer_state(const LoadedCheckpoint& checkpoint, int64_t numel) {
  ConsolidatedOptimizerState out;
  std::map<std::string, std::vector<ElementRange>> ranges;
  std::set<std::string> keys;
  bool first = true;
  for (const std::string& file : optimizer_state_files(checkpoint)) {
    const StoredOptimizerState s = read_optimizer_state(checkpoint, file);
    std::set<std::string> these;
    for (const auto& entry : s.pieces) these.insert(entry.first);
    if (first) {
      out.optimizer = s.optimizer, out.param_names = s.param_names, out.step = s.step.clone(), keys = these;
      for (const std::string& key : keys) out.values[key] = Tensor::zeros({numel});
    } else if (s.optimizer != out.optimizer || these != keys || s.step.data()[0] != out.step.data()[0]) {
      throw_error(ErrorKind::kFormat, s.source, "does not match the first optimizer file (optimizer, step or state keys differ)");
    }
    first = false;
    for (const auto& [key, pieces] : s.pieces) {
      for (const StatePiece& p : pieces) {
        if (p.begin + p.values.numel() > numel)
          throw_error(ErrorKind::kFormat, s.source,
                      "'" + key + "' holds elements up to " + std::to_string(p.begin + p.values.numel()) +
                          ", beyond the model's " + std::to_string(numel));
        std::memcpy(out.values[key].data() + p.begin, p.values.data(), static_cast<size_t>(p.values.numel()) * sizeof(float));
        ranges[key].push_back({p.begin, p.values.numel()});
      }
    }
  }
  for (auto& [key, list] : ranges) check_ranges_tile(list, numel, checkpoint.path + ": optimizer state '" + key + "'");
  return out;
}

}  // namespace gradmesh::checkpoint
