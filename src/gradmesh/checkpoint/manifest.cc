#include "gradmesh/checkpoint/manifest.h"

#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::checkpoint {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

[[noreturn]] void format_error(const std::string& where, const std::string& what) {
  throw_error(ErrorKind::kFormat, where, what);
}

const Json& require(const std::string& where, const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end()) format_error(where, std::string("missing field '") + key + "'");
  return *it;
}

int64_t require_int(const std::string& where, const Json& object, const char* key, int64_t min, int64_t max) {
  const Json& value = require(where, object, key);
  if (!value.is_number_integer()) {
    format_error(where, std::string("field '") + key + "' is " + value.dump() + "; expected an integer");
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kInt64Max)) {
    format_error(where, std::string("field '") + key + "' is " + value.dump() + "; expected an integer " +
                            int_range_text(min, max));
  }
  const auto number = value.get<int64_t>();
  if (number < min || number > max) {
    format_error(where, std::string("field '") + key + "' is " + value.dump() + "; expected an integer " +
                            int_range_text(min, max));
  }
  return number;
}

const std::string& require_string(const std::string& where, const Json& object, const char* key) {
  const Json& value = require(where, object, key);
  if (!value.is_string()) format_error(where, std::string("field '") + key + "' is " + value.dump() + "; expected a string");
  return value.get_ref<const std::string&>();
}

bool is_xxh64_hex(const std::string& text) {
  if (text.size() != 16) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

ManifestFile parse_file_entry(const std::string& source, const Json& entry, size_t index) {
  const std::string where = source + ": files[" + std::to_string(index) + "]";
  if (!entry.is_object()) format_error(where, "is " + entry.dump() + "; expected an object");
  ManifestFile file;
  file.path = require_string(where, entry, "path");
  if (!is_plain_file_name(file.path)) {
    format_error(where, "path '" + file.path + "' is not a plain file name inside the checkpoint directory");
  }
  file.bytes = static_cast<uint64_t>(require_int(where, entry, "bytes", 0, kInt64Max));
  file.xxh64 = require_string(where, entry, "xxh64");
  if (!is_xxh64_hex(file.xxh64)) {
    format_error(where, "xxh64 '" + file.xxh64 + "' is not 16 lowercase hex digits");
  }
  file.rank = static_cast<int>(require_int(where, entry, "rank", 0, std::numeric_limits<int>::max()));
  if (entry.contains("shard")) {
    const Json& shard = entry["shard"];
    const std::string shard_where = where + ".shard";
    if (!shard.is_object()) format_error(shard_where, "is " + shard.dump() + "; expected an object");
    ShardInfo info;
    info.count = static_cast<int>(require_int(shard_where, shard, "count", 1, std::numeric_limits<int>::max()));
    info.index = static_cast<int>(require_int(shard_where, shard, "index", 1, info.count));
    info.of = require_string(shard_where, shard, "of");
    file.shard = info;
  }
  return file;
}

}  // namespace

const ManifestFile* Manifest::find(const std::string& path) const {
  for (const ManifestFile& file : files)
    if (file.path == path) return &file;
  return nullptr;
}

std::string manifest_json(const Manifest& manifest) {
  OrderedJson files = OrderedJson::array();
  for (const ManifestFile& file : manifest.files) {
    OrderedJson entry = {{"path", file.path}, {"bytes", file.bytes}, {"xxh64", file.xxh64}, {"rank", file.rank}};
    if (file.shard) entry["shard"] = {{"index", file.shard->index}, {"count", file.shard->count}, {"of", file.shard->of}};
    files.push_back(std::move(entry));
  }
  OrderedJson root = {{"format", kManifestFormat},
                      {"version", kManifestVersion},
                      {"step", manifest.step},
                      {"world_size", manifest.world_size},
                      {"created_unix", manifest.created_unix}};
  if (const std::optional<SavedLayout>& l = manifest.layout)
    root["layout"] = {{"dp", l->dp}, {"pp", l->pp}, {"tp", l->tp}, {"zero", l->zero}};
  root["files"] = std::move(files);
  return root.dump(2) + "\n";
}

Manifest parse_manifest(const std::string& text, const std::string& source) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    format_error(source, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) format_error(source, "is " + std::string(root.type_name()) + "; expected a JSON object");
  const std::string& format = require_string(source, root, "format");
  if (format != kManifestFormat) {
    format_error(source, "field 'format' is '" + format + "'; expected '" + kManifestFormat + "'");
  }
  require_int(source, root, "version", kManifestVersion, kManifestVersion);
  Manifest manifest;
  manifest.step = require_int(source, root, "step", 0, kInt64Max);
  manifest.world_size = static_cast<int>(require_int(source, root, "world_size", 1, std::numeric_limits<int>::max()));
  manifest.created_unix = require_int(source, root, "created_unix", 0, kInt64Max);
  if (root.contains("layout")) {
    const Json& layout = root["layout"];
    const std::string where = source + ": layout";
    if (!layout.is_object()) format_error(where, "is " + layout.dump() + "; expected an object {dp, pp, tp, zero}");
    const auto at_least_one = [&](const char* key) {
      return static_cast<int>(require_int(where, layout, key, 1, std::numeric_limits<int>::max()));
    };
    SavedLayout l;
    l.dp = at_least_one("dp"), l.pp = at_least_one("pp"), l.tp = at_least_one("tp");
    l.zero = static_cast<int>(require_int(where, layout, "zero", 0, 3));
    if (static_cast<int64_t>(l.dp) * l.pp * l.tp != manifest.world_size)
      format_error(where, "dp x pp x tp = " + std::to_string(static_cast<int64_t>(l.dp) * l.pp * l.tp) +
                              " is not the world size " + std::to_string(manifest.world_size));
    manifest.layout = l;
  }
  const Json& files = require(source, root, "files");
  if (!files.is_array()) format_error(source, "field 'files' is " + files.dump() + "; expected an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    manifest.files.push_back(parse_file_entry(source, files[i], i));
    if (!seen.insert(manifest.files.back().path).second) {
      format_error(source, "files lists '" + manifest.files.back().path + "' twice");
    }
  }
  return manifest;
}

std::string shard_file_name(const std::string& of, int index, int count) {
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".shard-%05d-of-%05d.safetensors", index, count);
  return of + suffix;
}

std::optional<ShardInfo> parse_shard_file_name(const std::string& name) {
  const std::string kExtension = ".safetensors";
  const size_t marker = name.rfind(".shard-");
  if (marker == std::string::npos || marker == 0 || name.size() < kExtension.size() ||
      name.compare(name.size() - kExtension.size(), kExtension.size(), kExtension) != 0) {
    return std::nullopt;
  }
  const std::string middle = name.substr(marker + 7, name.size() - kExtension.size() - marker - 7);  // "00001-of-00004"
  const size_t of = middle.find("-of-");
  if (of == std::string::npos) return std::nullopt;
  const std::optional<int64_t> count = try_parse_int(middle.substr(of + 4), 1, std::numeric_limits<int>::max());
  const std::optional<int64_t> index = try_parse_int(middle.substr(0, of), 1, count.value_or(0));
  if (!count || !index) return std::nullopt;
  return ShardInfo{static_cast<int>(*index), static_cast<int>(*count), name.substr(0, marker)};
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.front() != '.' && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

std::string step_dir_name(int64_t step) { return "step-" + std::to_string(step); }

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  const std::optional<int64_t> step = try_parse_int(digits, 0, kInt64Max);
  if (!step || std::to_string(*step) != digits) return std::nullopt;  // no padding, no sign
  return step;
}

}  // namespace gradmesh::checkpoint
