// MdsReader (mds.h): index.json checked field by field, then every sample
// read with two reads (its offsets, then its bytes) through ShardFiles
// (shard_files.h: a directory or a URL), each checked against
// the shard's size before anything is allocated, so a corrupt or hostile
// shard is an error naming the shard and the sample, never a crash or a
// huge allocation.
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "gradmesh/core/error.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/shard_files.h"

namespace gradmesh::data {

namespace {

using nlohmann::json;

constexpr int64_t kMaxIndexBytes = int64_t{256} << 20;

uint32_t read_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// `field` of `entry`, or Error(kFormat) naming the index, the shard and the field.
const json& field(const json& entry, const char* name, const std::string& where) {
  if (!entry.is_object() || !entry.contains(name))
    throw_error(ErrorKind::kFormat, where, std::string("missing \"") + name + "\"");
  return entry.at(name);
}

int64_t count_field(const json& entry, const char* name, const std::string& where, int64_t max) {
  const json& v = field(entry, name, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max)
    throw_error(ErrorKind::kFormat, where, std::string("\"") + name + "\" must be an integer from 0 to " +
                                               std::to_string(max) + ", got " + v.dump());
  return v.get<int64_t>();
}

// A shard's file name must stay inside the set's directory.
std::string safe_basename(const json& entry, const std::string& where) {
  const json& raw = field(entry, "raw_data", where);
  const json& name = field(raw, "basename", where + " raw_data");
  const std::string text = name.is_string() ? name.get<std::string>() : std::string();
  if (text.empty() || text.find('/') != std::string::npos || text == "." || text == ".." || text.size() > 255)
    throw_error(ErrorKind::kFormat, where, "raw_data.basename must be a file name in the set's directory, got " +
                                               name.dump());
  return text;
}

std::vector<MdsColumn> columns_of(const json& entry, const std::string& where) {
  const json& names = field(entry, "column_names", where);
  const json& encodings = field(entry, "column_encodings", where);
  if (!names.is_array() || !encodings.is_array() || names.size() != encodings.size() || names.empty() ||
      names.size() > 256)
    throw_error(ErrorKind::kFormat, where, "column_names and column_encodings must be lists of the same length (1-256)");
  std::vector<MdsColumn> columns;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string() || !encodings[i].is_string())
      throw_error(ErrorKind::kFormat, where, "column " + std::to_string(i) + ": name and encoding must be strings");
    MdsColumn c{names[i].get<std::string>(), encodings[i].get<std::string>(), std::nullopt};
    c.size = mds_fixed_size(c.encoding);
    columns.push_back(std::move(c));
  }
  return columns;
}

json read_index(const ShardFiles& files) {
  const std::string path = files.where("index.json");
  const std::optional<std::string> text = files.read_whole("index.json", kMaxIndexBytes);
  if (!text)
    throw_error(ErrorKind::kIo, path, is_http_location(path)
                                          ? "not found (HTTP 404; the base URL of an MDS set serves index.json under it)"
                                          : "cannot open (an MDS set's directory holds index.json)");
  try {
    return json::parse(*text);
  } catch (const json::exception& e) {
    throw_error(ErrorKind::kFormat, path, std::string("not JSON: ") + e.what());
  }
}

}  // namespace

MdsReader::MdsReader(const std::string& location, const MdsReadOptions& options)
    : dir_(location), files_(open_shard_files(location, options)) {
  const std::string index_path = files_->where("index.json");
  const json index = read_index(*files_);
  if (!index.is_object() || index.value("version", json()) != json(2))
    throw_error(ErrorKind::kFormat, index_path, "not a version 2 MDS index (\"version\": 2)");
  const json& shards = field(index, "shards", index_path);
  if (!shards.is_array() || shards.empty()) throw_error(ErrorKind::kFormat, index_path, "\"shards\" must list shards");
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string where = index_path + ": shard " + std::to_string(s);
    const json& e = shards[s];
    if (field(e, "format", where) != json("mds"))
      throw_error(ErrorKind::kFormat, where, "format " + e.at("format").dump() + " (only \"mds\" is read)");
    if (e.contains("zip_data") && !e.at("zip_data").is_null())
      throw_error(ErrorKind::kFormat, where, "compressed shards (zip_data) are not read; write the set uncompressed");
    std::vector<MdsColumn> columns = columns_of(e, where);
    if (s == 0) columns_ = std::move(columns);
    else if (columns.size() != columns_.size() ||
             !std::equal(columns.begin(), columns.end(), columns_.begin(), [](const MdsColumn& a, const MdsColumn& b) {
               return a.name == b.name && a.encoding == b.encoding;
             }))
      throw_error(ErrorKind::kFormat, where, "its columns differ from shard 0's");
    MdsShardInfo info;
    info.file = safe_basename(e, where);
    info.samples = count_field(e, "samples", where, int64_t{1} << 30);
    info.bytes = count_field(field(e, "raw_data", where), "bytes", where + " raw_data", (int64_t{1} << 32) - 1);
    if (4 * (info.samples + 2) > info.bytes)
      throw_error(ErrorKind::kFormat, where, std::to_string(info.bytes) + " bytes cannot hold the offsets of " +
                                                 std::to_string(info.samples) + " samples");
    const json& hashes = e.at("raw_data").value("hashes", json::object());
    if (hashes.is_object() && hashes.contains("xxh64") && hashes.at("xxh64").is_string())
      info.xxh64 = hashes.at("xxh64").get<std::string>();
    shards_.push_back(std::move(info));
  }
  starts_.push_back(0);
  for (const MdsShardInfo& s : shards_) starts_.push_back(starts_.back() + s.samples);
  total_ = starts_.back();
  std::vector<std::string> names;
  std::vector<int64_t> sizes;
  for (const MdsShardInfo& s : shards_) {
    names.push_back(s.file);
    sizes.push_back(s.bytes);
  }
  const std::vector<std::string> heads = files_->open(names, sizes, 4);
  for (size_t s = 0; s < shards_.size(); ++s) {
    const std::string path = files_->where(shards_[s].file);
    if (heads[s].size() < 4) throw_error(ErrorKind::kFormat, path, "shorter than its 4-byte sample count");
    const uint32_t n = read_u32(reinterpret_cast<const unsigned char*>(heads[s].data()));
    if (n != shards_[s].samples)
      throw_error(ErrorKind::kFormat, path, "holds " + std::to_string(n) + " samples; index.json says " +
                                                std::to_string(shards_[s].samples));
  }
}

MdsReader::~MdsReader() = default;

int64_t MdsReader::bytes_read() const { return files_->bytes_fetched(); }

size_t MdsReader::column(const std::string& name) const {
  std::string have;
  for (size_t c = 0; c < columns_.size(); ++c) {
    if (columns_[c].name == name) return c;
    have += (c ? ", " : "") + columns_[c].name;
  }
  throw_error(ErrorKind::kFormat, dir_, "has no column \"" + name + "\" (it has " + have + ")");
}

size_t MdsReader::shard_of(int64_t index) const {
  GRADMESH_CHECK(index >= 0 && index < total_, "sample index out of range");
  return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
}

void MdsReader::read_exact(size_t shard, int64_t offset, void* out, int64_t bytes, int64_t index) const {
  try {
    files_->read(shard, offset, out, bytes);
  } catch (const Error& e) {
    if (index < 0) throw;
    throw Error(e.kind(), std::string(e.what()) + " (reading sample " + std::to_string(index) + ")");
  }
}

void MdsReader::read(int64_t index, std::string& data, std::vector<std::string_view>& values) const {
  const size_t s = shard_of(index);
  const int64_t local = index - starts_[s];
  const MdsShardInfo& shard = shards_[s];
  auto where = [&] {
    return files_->where(shard.file) + ": sample " + std::to_string(index) + " (" +
           std::to_string(local) + " of the shard)";
  };
  unsigned char pair[8];
  read_exact(s, 4 * (1 + local), pair, 8, index);
  const int64_t begin = read_u32(pair), end = read_u32(pair + 4);
  const int64_t header_end = 4 * (shard.samples + 2);
  if (begin < header_end || end < begin || end > shard.bytes || end - begin > kMdsMaxSampleBytes)
    throw_error(ErrorKind::kFormat, where(), "impossible offsets " + std::to_string(begin) + ".." +
                                                 std::to_string(end) + " in a shard of " + std::to_string(shard.bytes) +
                                                 " bytes");
  data.resize(static_cast<size_t>(end - begin));
  read_exact(s, begin, data.data(), end - begin, index);
  // The variable columns' sizes come first, then every column's bytes.
  size_t at = 0;
  values.clear();
  for (const MdsColumn& c : columns_) {
    if (c.size) continue;
    if (at + 4 > data.size()) throw_error(ErrorKind::kFormat, where(), "shorter than its column sizes");
    at += 4;
  }
  size_t size_at = 0;
  for (const MdsColumn& c : columns_) {
    int64_t size = 0;
    if (c.size) {
      size = *c.size;
    } else {
      size = read_u32(reinterpret_cast<const unsigned char*>(data.data()) + size_at);
      size_at += 4;
    }
    if (size > static_cast<int64_t>(data.size() - at))
      throw_error(ErrorKind::kFormat, where(), "column \"" + c.name + "\" claims " + std::to_string(size) +
                                                   " bytes; the sample has " + std::to_string(data.size() - at) +
                                                   " left");
    values.emplace_back(data.data() + at, static_cast<size_t>(size));
    at += static_cast<size_t>(size);
  }
  if (at != data.size())
    throw_error(ErrorKind::kFormat, where(), std::to_string(data.size() - at) + " bytes after its last column");
}

std::vector<std::string> MdsReader::sample(int64_t index) const {
  std::string buffer;
  std::vector<std::string_view> views;
  read(index, buffer, views);
  return {views.begin(), views.end()};
}

std::string MdsReader::verify_shard(size_t s) const {
  const MdsShardInfo& shard = shards_[s];
  if (shard.xxh64.empty()) return "index.json records no xxh64 checksum for it";
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> buffer(4 << 20);  // over HTTP, one request per 4 MiB
  for (int64_t offset = 0; offset < shard.bytes;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buffer.size()), shard.bytes - offset);
    try {
      files_->read_once(s, offset, buffer.data(), n);
    } catch (...) {
      XXH64_freeState(state);
      throw;
    }
    XXH64_update(state, buffer.data(), static_cast<size_t>(n));
    offset += n;
  }
  const std::string found = mds_xxh64_hex(XXH64_digest(state));
  XXH64_freeState(state);
  if (shard.xxh64 == found) return "";
  return std::string("xxh64 ") + found + ", index.json says " + shard.xxh64;
}

}  // namespace gradmesh::data
