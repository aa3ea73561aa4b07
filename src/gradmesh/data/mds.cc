#include "gradmesh/data/mds.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/error.h"

namespace gradmesh::data {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// MDS offsets are uint32: a shard cannot pass 4 GiB.
constexpr int64_t kMaxShardBytes = (int64_t{1} << 32) - 1;

const std::vector<std::pair<std::string, int64_t>>& scalar_sizes() {
  static const std::vector<std::pair<std::string, int64_t>> sizes = {
      {"int", 8},     {"uint8", 1},  {"uint16", 2}, {"uint32", 4},  {"uint64", 8},   {"int8", 1},
      {"int16", 2},   {"int32", 4},  {"int64", 8},  {"float16", 2}, {"float32", 4},  {"float64", 8}};
  return sizes;
}

void append_u32(std::string& out, uint64_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string shard_name(size_t index) {
  char name[32];
  std::snprintf(name, sizeof name, "shard.%05zu.mds", index);
  return name;
}

// The per-shard configuration Streaming's writer records (in index.json and in each shard).
json shard_config(const std::vector<MdsColumn>& columns, int64_t shard_bytes) {
  json names = json::array(), encodings = json::array(), sizes = json::array();
  for (const MdsColumn& c : columns) {
    names.push_back(c.name);
    encodings.push_back(c.encoding);
    sizes.push_back(c.size ? json(*c.size) : json(nullptr));
  }
  return {{"column_encodings", encodings}, {"column_names", names}, {"column_sizes", sizes},
          {"compression", nullptr}, {"format", "mds"}, {"hashes", json::array({"xxh64"})},
          {"size_limit", shard_bytes}, {"version", 2}};
}

}  // namespace

std::string mds_xxh64_hex(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::optional<int64_t> mds_fixed_size(const std::string& encoding) {
  for (const auto& [name, size] : scalar_sizes())
    if (encoding == name) return size;
  if (encoding == "bytes" || encoding == "str" || encoding == "jpeg" || encoding == "png" ||
      encoding.rfind("jpeg:", 0) == 0)
    return std::nullopt;
  // ndarray:<dtype>:<d0,d1,...>: a fixed shape of a fixed dtype is raw elements.
  if (encoding.rfind("ndarray:", 0) == 0) {
    const std::string rest = encoding.substr(8);
    const size_t colon = rest.find(':');
    if (colon != std::string::npos) {
      const std::string dtype = rest.substr(0, colon), dims = rest.substr(colon + 1);
      int64_t element = 0;
      for (const auto& [name, size] : scalar_sizes())
        if (dtype == name && name != "int") element = size;
      int64_t count = 1;
      bool ok = element > 0 && !dims.empty();
      size_t at = 0;
      while (ok && at <= dims.size()) {
        const size_t comma = std::min(dims.find(',', at), dims.size());
        const std::string dim = dims.substr(at, comma - at);
        ok = !dim.empty() && dim.size() <= 9 && dim.find_first_not_of("0123456789") == std::string::npos &&
             std::stoll(dim) > 0;
        if (ok) count *= std::stoll(dim);
        ok = ok && count * element <= kMdsMaxSampleBytes;
        at = comma + 1;
      }
      if (ok) return count * element;
    }
  }
  throw_error(ErrorKind::kFormat, "encoding \"" + encoding + "\"",
              "not an MDS encoding gradmesh reads (int, uint8..int64, float16..float64, bytes, str, jpeg, png, "
              "ndarray:<dtype>:<d0,d1,...>)");
}

MdsWriter::MdsWriter(std::string dir, std::vector<MdsColumn> columns, int64_t shard_bytes)
    : dir_(std::move(dir)), columns_(std::move(columns)), shard_bytes_(shard_bytes) {
  if (columns_.empty()) throw_error(ErrorKind::kUsage, dir_, "an MDS set needs at least one column");
  if (shard_bytes_ < 1024 || shard_bytes_ > kMaxShardBytes)
    throw_error(ErrorKind::kUsage, dir_, "the shard size must be from 1 KiB to 4 GiB, got " + std::to_string(shard_bytes_));
  // Streaming orders the columns by name; a reader takes the order from index.json.
  std::sort(columns_.begin(), columns_.end(), [](const MdsColumn& a, const MdsColumn& b) { return a.name < b.name; });
  for (MdsColumn& c : columns_) c.size = mds_fixed_size(c.encoding);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw_error(ErrorKind::kIo, dir_, "cannot create the directory: " + ec.message());
}

MdsWriter::~MdsWriter() = default;

void MdsWriter::add(const std::vector<std::string_view>& values) {
  if (finished_) throw_error(ErrorKind::kInternal, dir_, "a sample added after finish()");
  if (values.size() != columns_.size())
    throw_error(ErrorKind::kInternal, dir_, "a sample of " + std::to_string(values.size()) + " columns for " +
                                                std::to_string(columns_.size()));
  std::string sample;
  for (size_t c = 0; c < columns_.size(); ++c) {
    if (columns_[c].size) {
      if (static_cast<int64_t>(values[c].size()) != *columns_[c].size)
        throw_error(ErrorKind::kInternal, dir_ + ": column " + columns_[c].name,
                    std::to_string(values[c].size()) + " bytes for a fixed size of " + std::to_string(*columns_[c].size));
    } else {
      append_u32(sample, values[c].size());
    }
  }
  for (const std::string_view v : values) sample.append(v);
  if (static_cast<int64_t>(sample.size()) > kMdsMaxSampleBytes)
    throw_error(ErrorKind::kUsage, dir_, "a sample of " + std::to_string(sample.size()) + " bytes (at most 256 MiB)");
  const int64_t added = static_cast<int64_t>(sample.size()) + 4;  // its bytes and its offset
  if (!samples_.empty() && open_bytes_ + added > shard_bytes_) close_shard();
  open_bytes_ += added;
  samples_.push_back(std::move(sample));
  ++total_;
}

void MdsWriter::close_shard() {
  if (samples_.empty()) return;
  const std::string config = shard_config(columns_, shard_bytes_).dump();
  const size_t n = samples_.size();
  std::string header;
  append_u32(header, n);
  uint64_t offset = 4 + 4 * (n + 1) + config.size();
  for (size_t i = 0; i <= n; ++i) {
    append_u32(header, offset);
    if (i < n) offset += samples_[i].size();
  }
  if (offset > static_cast<uint64_t>(kMaxShardBytes))
    throw_error(ErrorKind::kUsage, dir_, "a shard would pass 4 GiB; choose a smaller shard size");
  header += config;
  const std::string name = shard_name(shard_entries_.size());
  const std::string path = (fs::path(dir_) / name).string();
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, header.data(), header.size());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const std::string& s : samples_) {
      out.write(s.data(), static_cast<std::streamsize>(s.size()));
      XXH64_update(state, s.data(), s.size());
    }
    if (!out.flush()) {
      XXH64_freeState(state);
      throw_error(ErrorKind::kIo, path, "cannot write the shard");
    }
  }
  const uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  json entry = shard_config(columns_, shard_bytes_);
  entry["raw_data"] = {{"basename", name}, {"bytes", offset}, {"hashes", {{"xxh64", mds_xxh64_hex(hash)}}}};
  entry["samples"] = n;
  entry["zip_data"] = nullptr;
  shard_entries_.push_back(entry.dump());
  samples_.clear();
  open_bytes_ = 0;
  if (on_shard_closed) on_shard_closed(total_);  // add() closes a shard before counting its new sample
}

std::string MdsWriter::closed_index() const {
  std::string text = "[";
  for (size_t i = 0; i < shard_entries_.size(); ++i) text += (i ? ", " : "") + shard_entries_[i];
  return text + "]";
}

void MdsWriter::resume(const std::string& closed_index) {
  if (total_ != 0 || !shard_entries_.empty()) throw_error(ErrorKind::kInternal, dir_, "resume() after add()");
  const json entries = json::parse(closed_index, nullptr, false);
  if (!entries.is_array()) throw_error(ErrorKind::kFormat, dir_, "the recorded shards are not a JSON array");
  const json columns = shard_config(columns_, shard_bytes_);
  for (const json& entry : entries) {
    const std::string name = shard_name(shard_entries_.size());
    const std::string path = (fs::path(dir_) / name).string();
    if (!entry.is_object() || entry.value("column_encodings", json()) != columns["column_encodings"] ||
        entry.value("column_names", json()) != columns["column_names"])
      throw_error(ErrorKind::kFormat, path, "was written with other columns than this set's");
    const json raw = entry.value("raw_data", json());
    const int64_t samples = entry.value("samples", int64_t{-1});
    if (!raw.is_object() || raw.value("basename", "") != name || samples < 1)
      throw_error(ErrorKind::kFormat, path, "the record of this shard is malformed");
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string recorded = raw.value("hashes", json::object()).value("xxh64", "");
    if (!in.good() && !in.eof()) throw_error(ErrorKind::kFormat, path, "cannot be read back");
    if (static_cast<int64_t>(bytes.size()) != raw.value("bytes", int64_t{-1}) ||
        mds_xxh64_hex(XXH64(bytes.data(), bytes.size(), 0)) != recorded)
      throw_error(ErrorKind::kFormat, path, "differs from its record (size or xxh64): it changed since it was written");
    shard_entries_.push_back(entry.dump());
    total_ += samples;
  }
}

int64_t MdsWriter::finish() {
  if (finished_) return total_;
  close_shard();
  const std::string index = "{\"shards\": " + closed_index() + ", \"version\": 2}\n";
  write_file_atomically((fs::path(dir_) / "index.json").string(), index);
  finished_ = true;
  return total_;
}

}  // namespace gradmesh::data
