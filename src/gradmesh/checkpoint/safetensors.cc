#include "gradmesh/checkpoint/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping here");

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;
// The reference writer pads the header so the data buffer starts 8-byte aligned.
constexpr size_t kHeaderAlignment = 8;
// A valid header nests at most three deep: top object -> entry object ->
// shape/data_offsets array. Refusing anything deeper while parsing bounds
// the work a hostile header can cause.
constexpr int kMaxHeaderNesting = 3;

// Every dtype the safetensors specification defines, so that a valid file
// we cannot load gets "not supported" rather than "not a dtype".
constexpr const char* kSpecDTypes[] = {"BOOL",    "U8",      "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4",
                                       "F6_E2M3", "F6_E3M2", "I16", "U16",     "F16",     "BF16",    "I32",
                                       "U32",     "F32",     "F64", "C64",     "I64",     "U64"};

uint64_t load_u64_le(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

void store_u64_le(uint64_t value, uint8_t* bytes) {
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
}

std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A JSON value quoted in an error message, cut short so a hostile header
// cannot flood the terminal.
std::string brief(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] void header_error(const std::string& where, const std::string& what) {
  throw_error(ErrorKind::kFormat, where, what);
}

// ---------------------------------------------------------------------------
// Reading: length prefix -> header JSON -> entry plans -> layout check. Only
// after all of it passes is tensor memory allocated.

// Where one tensor's bytes lie in the data buffer, validated against the header.
struct EntryPlan {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  size_t header_position = 0;  // orders zero-size tensors that share an offset
};

struct HeaderPlan {
  std::vector<EntryPlan> entries;  // sorted by data offset
  std::map<std::string, std::string> metadata;
};

void check_file_size(const std::string& source, uint64_t file_size) {
  if (file_size < kLengthPrefixBytes) {
    header_error(source, "file is " + std::to_string(file_size) +
                             " bytes long, shorter than the 8-byte header length that starts every "
                             "safetensors file; is this a safetensors file?");
  }
}

void check_header_length(const std::string& source, uint64_t header_bytes, uint64_t file_size) {
  if (header_bytes == 0) {
    header_error(source,
                 "header length is 0; expected a JSON object of at least 2 bytes ('{}') after the "
                 "8-byte length");
  }
  if (header_bytes > kMaxHeaderBytes) {
    header_error(source, "header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                             std::to_string(kMaxHeaderBytes) + " bytes; the file is corrupt or not a safetensors file");
  }
  if (header_bytes > file_size - kLengthPrefixBytes) {
    header_error(source, "header length " + std::to_string(header_bytes) + " runs past the end of the file (only " +
                             std::to_string(file_size - kLengthPrefixBytes) +
                             " bytes follow the 8-byte length); the file is truncated or not a safetensors file");
  }
}

// Parses the header text. nlohmann's object keeps only the last of duplicate
// keys, so a parser callback sees every key and rejects repeats; it also
// records the top-level keys in file order.
Json parse_header_json(const std::string& source, const char* text, size_t size, std::vector<std::string>* top_keys) {
  if (text[0] != '{') {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[0]));
    header_error(source, std::string("header starts with byte ") + byte +
                             " instead of '{'; the format requires the header to be a JSON object starting at byte 8");
  }
  // nlohmann's lexer treats NUL as end of input, which would silently accept
  // "{...}\0<garbage>". NUL is never valid in JSON text, so refuse it here.
  if (const void* nul = std::memchr(text, '\0', size)) {
    header_error(source, "header contains a NUL byte at offset " +
                             std::to_string(static_cast<const char*>(nul) - text) +
                             "; expected JSON text padded with spaces, not zeros");
  }
  std::vector<std::set<std::string>> open_objects;  // keys seen in each object being parsed
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (depth >= kMaxHeaderNesting) {
          header_error(source, "header nests objects or arrays more than " + std::to_string(kMaxHeaderNesting) +
                                   " levels deep; a safetensors header has tensor entries with flat arrays only");
        }
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second) {
          header_error(source, open_objects.size() == 1
                                   ? "header lists '" + key + "' twice; every tensor name must be unique"
                                   : "header repeats key '" + key + "' inside one object; keys must be unique");
        }
        if (open_objects.size() == 1) top_keys->push_back(key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return Json::parse(text, text + size, on_event);
  } catch (const Json::exception& e) {
    header_error(source, std::string("header is not valid JSON: ") + e.what());
  }
}

// safetensors stores sizes as unsigned integers: JSON 3, never -3 or 3.0.
bool as_index(const Json& value, uint64_t* out) {
  if (!value.is_number_unsigned()) return false;
  *out = value.get<uint64_t>();
  return true;
}

DType parse_dtype(const std::string& where, const Json& value) {
  if (!value.is_string()) header_error(where, "dtype is " + brief(value) + "; expected a string such as \"F32\"");
  const std::string& name = value.get_ref<const std::string&>();
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  for (const char* known : kSpecDTypes) {
    if (name == known) {
      header_error(where, "dtype " + name +
                              " not supported (gradmesh loads F32 and BF16); convert the "
                              "tensor to float32 or bfloat16 before saving");
    }
  }
  header_error(where, "dtype " + brief(value) + " is not a safetensors dtype; expected F32 or BF16");
}

Shape parse_shape(const std::string& where, const Json& value) {
  if (!value.is_array())
    header_error(where, "shape is " + brief(value) + "; expected an array of non-negative integers");
  Shape shape;
  uint64_t numel = 1;
  constexpr auto kMaxNumel = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (const Json& dim : value) {
    uint64_t size = 0;
    if (!as_index(dim, &size)) {
      header_error(where, "shape " + brief(value) + " has element " + brief(dim) + "; expected non-negative integers");
    }
    // Multiplied in order like the reference reader, so [0, huge, huge] is
    // fine and [huge, huge, 0] is an overflow there and here alike.
    if (size > kMaxNumel || (size != 0 && numel > kMaxNumel / size)) {
      header_error(where, "shape " + brief(value) + " has more elements than fit in a 64-bit count");
    }
    numel *= size;
    shape.push_back(static_cast<int64_t>(size));
  }
  return shape;
}

EntryPlan parse_entry(const std::string& source, const std::string& name, const Json& entry, uint64_t data_size) {
  const std::string where = source + ": tensor '" + name + "'";
  constexpr const char* kExpected = "an object with exactly the keys dtype, shape and data_offsets";
  if (!entry.is_object()) {
    header_error(where, std::string("entry is ") + entry.type_name() + " " + brief(entry) + "; expected " + kExpected);
  }
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      header_error(where, "unexpected key '" + it.key() + "'; expected " + kExpected);
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) header_error(where, std::string("missing key '") + key + "'; expected " + kExpected);
  }

  EntryPlan plan;
  plan.name = name;
  plan.dtype = parse_dtype(where, entry["dtype"]);
  plan.shape = parse_shape(where, entry["shape"]);
  const Json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !as_index(offsets[0], &plan.begin) ||
      !as_index(offsets[1], &plan.end)) {
    header_error(where, "data_offsets is " + brief(offsets) + "; expected [begin, end] with two non-negative integers");
  }
  if (plan.begin > plan.end) {
    header_error(where,
                 "data_offsets " + offsets_str(plan.begin, plan.end) + " end before they begin; expected begin <= end");
  }
  const auto numel = static_cast<uint64_t>(shape_numel(plan.shape));
  if (numel > std::numeric_limits<uint64_t>::max() / dtype_size(plan.dtype)) {
    header_error(where, "dtype " + std::string(dtype_name(plan.dtype)) + " and shape " + shape_str(plan.shape) +
                            " need more bytes than fit in a 64-bit size");
  }
  const uint64_t need = numel * dtype_size(plan.dtype);
  if (plan.end - plan.begin != need) {
    header_error(where, "data_offsets " + offsets_str(plan.begin, plan.end) + " give " +
                            std::to_string(plan.end - plan.begin) + " bytes but dtype " + dtype_name(plan.dtype) +
                            " and shape " + shape_str(plan.shape) + " need " + std::to_string(need));
  }
  if (plan.end > data_size) {
    header_error(where, "data_offsets " + offsets_str(plan.begin, plan.end) +
                            " run past the end of the data buffer, which holds " + std::to_string(data_size) +
                            " bytes; the file is truncated or the header is wrong");
  }
  return plan;
}

void parse_metadata(const std::string& source, const Json& value, std::map<std::string, std::string>* out) {
  if (!value.is_object()) {
    header_error(source, "__metadata__ is " + brief(value) + "; expected an object whose values are strings");
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it.value().is_string()) {
      header_error(source, "__metadata__ key '" + it.key() + "' has value " + brief(it.value()) +
                               "; expected a string (safetensors metadata maps strings to strings)");
    }
    (*out)[it.key()] = it.value().get<std::string>();
  }
}

// The tensors must tile the data buffer: sorted by offset, each begins where
// the previous ended and the last ends at the end of the file. This is what
// makes every byte of the file accounted for.
void check_layout(const std::string& source, std::vector<EntryPlan>* entries, uint64_t data_size) {
  std::sort(entries->begin(), entries->end(), [](const EntryPlan& a, const EntryPlan& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.header_position < b.header_position;
  });
  uint64_t covered = 0;
  const EntryPlan* previous = nullptr;
  for (const EntryPlan& entry : *entries) {
    if (entry.begin > covered) {
      header_error(source, "bytes " + offsets_str(covered, entry.begin) +
                               " of the data buffer belong to no tensor (gap before tensor '" + entry.name +
                               "' at data_offsets " + offsets_str(entry.begin, entry.end) +
                               "); expected tensors to cover the buffer contiguously");
    }
    if (entry.begin < covered) {
      header_error(source, "tensor '" + entry.name + "' at data_offsets " + offsets_str(entry.begin, entry.end) +
                               " overlaps tensor '" + previous->name + "' at data_offsets " +
                               offsets_str(previous->begin, previous->end) +
                               "; expected each tensor to start where the previous one ends");
    }
    covered = entry.end;
    previous = &entry;
  }
  if (covered != data_size) {
    header_error(source, "the data buffer holds " + std::to_string(data_size) + " bytes but the tensors end at byte " +
                             std::to_string(covered) + ": " + std::to_string(data_size - covered) +
                             " trailing bytes belong to no tensor; expected the last tensor to end at the end of "
                             "the file");
  }
}

HeaderPlan parse_header(const std::string& source, const char* text, size_t size, uint64_t data_size) {
  std::vector<std::string> top_keys;
  const Json header = parse_header_json(source, text, size, &top_keys);
  HeaderPlan plan;
  for (size_t i = 0; i < top_keys.size(); ++i) {
    const std::string& key = top_keys[i];
    const Json& value = header.at(key);
    if (key == "__metadata__") {
      parse_metadata(source, value, &plan.metadata);
    } else {
      plan.entries.push_back(parse_entry(source, key, value, data_size));
      plan.entries.back().header_position = i;
    }
  }
  check_layout(source, &plan.entries, data_size);
  return plan;
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

void read_exactly(const std::string& path, std::FILE* file, void* out, size_t size) {
  if (size == 0) return;
  errno = 0;
  if (std::fread(out, 1, size, file) == size) return;
  if (std::ferror(file)) throw_error(ErrorKind::kIo, path, std::string("read failed: ") + std::strerror(errno));
  throw_error(ErrorKind::kIo, path, "the file ended early: it shrank while being read");
}

// ---------------------------------------------------------------------------
// Writing.

struct StoredTensor {
  const NamedTensor* source;
  DType dtype;     // as written to the file
  uint64_t bytes;  // numel * dtype_size(dtype)
};

std::vector<StoredTensor> plan_stored(const std::string& path, const std::vector<NamedTensor>& tensors,
                                      DType store_dtype) {
  std::set<std::string> names;
  std::vector<StoredTensor> stored;
  for (const NamedTensor& named : tensors) {
    const std::string where = path + ": tensor '" + named.name + "'";
    if (!named.tensor.defined()) throw_error(ErrorKind::kInternal, where, "tensor is undefined; nothing to write");
    if (named.name.empty() || named.name == "__metadata__") {
      throw_error(ErrorKind::kInternal, where, "name is reserved or empty; expected a state_dict name like '1.weight'");
    }
    if (!names.insert(named.name).second) {
      throw_error(ErrorKind::kInternal, where, "name given twice; tensor names must be unique");
    }
    const DType dtype = named.tensor.dtype() == DType::kBF16 ? DType::kBF16 : store_dtype;
    stored.push_back({&named, dtype, static_cast<uint64_t>(named.tensor.numel()) * dtype_size(dtype)});
  }
  return stored;
}

// Compact JSON in the reference writer's order ("__metadata__" first, entry
// fields dtype, shape, data_offsets), padded with spaces to kHeaderAlignment.
std::string build_header(const std::string& path, const std::vector<StoredTensor>& stored,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StoredTensor& tensor : stored) {
    header[tensor.source->name] = {{"dtype", dtype_name(tensor.dtype)},
                                   {"shape", tensor.source->tensor.shape()},
                                   {"data_offsets", {offset, offset + tensor.bytes}}};
    offset += tensor.bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw_error(
        ErrorKind::kInternal, path,
        std::string("cannot encode the header (a tensor name or metadata string is not valid UTF-8): ") + e.what());
  }
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  return text;
}

// Rounds float32 to bf16 in chunks so saving a large model in bf16 needs no
// second full-size copy.
void write_as_bf16(const ByteSink& sink, const Tensor& tensor) {
  constexpr int64_t kChunk = 16384;
  std::vector<uint16_t> chunk(static_cast<size_t>(std::min(tensor.numel(), kChunk)));
  const float* src = tensor.data();
  for (int64_t start = 0; start < tensor.numel(); start += kChunk) {
    const int64_t count = std::min(kChunk, tensor.numel() - start);
    for (int64_t i = 0; i < count; ++i) chunk[static_cast<size_t>(i)] = float_to_bf16(src[start + i]);
    sink(chunk.data(), static_cast<size_t>(count) * sizeof(uint16_t));
  }
}

// ---------------------------------------------------------------------------
// Describing.

std::string format_float(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

// Columns: name, dtype, shape, elements, bytes, min, max, mean, note.
std::vector<std::string> describe_row(const NamedTensor& named) {
  const Tensor& tensor = named.tensor;
  std::vector<std::string> row = {named.name, dtype_name(tensor.dtype()), shape_str(tensor.shape()),
                                  std::to_string(tensor.numel()), std::to_string(tensor.nbytes())};
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t finite = 0;
  for (float value : tensor.to_vector()) {
    if (!std::isfinite(value)) continue;
    lo = std::min<double>(lo, value);
    hi = std::max<double>(hi, value);
    sum += value;
    ++finite;
  }
  if (finite == 0) {
    row.insert(row.end(), {"-", "-", "-"});
  } else {
    row.insert(row.end(), {format_float(lo), format_float(hi), format_float(sum / static_cast<double>(finite))});
  }
  const int64_t non_finite = tensor.numel() - finite;
  row.push_back(non_finite > 0 ? std::to_string(non_finite) + " non-finite" : "");
  return row;
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const NamedTensor& named : tensors) {
    if (named.name == name) return &named.tensor;
  }
  return nullptr;
}

void encode_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                        const std::map<std::string, std::string>& metadata, DType store_dtype, const ByteSink& sink) {
  const std::vector<StoredTensor> stored = plan_stored(path, tensors, store_dtype);
  const std::string header = build_header(path, stored, metadata);
  uint8_t prefix[kLengthPrefixBytes];
  store_u64_le(header.size(), prefix);
  sink(prefix, sizeof prefix);
  sink(header.data(), header.size());
  for (const StoredTensor& tensor : stored) {
    const Tensor& source = tensor.source->tensor;
    if (tensor.dtype == source.dtype()) {
      if (source.nbytes() > 0) sink(source.raw(), source.nbytes());
    } else {
      write_as_bf16(sink, source);
    }
  }
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, DType store_dtype) {
  // Encoding validates the tensors before the temporary file exists, and the
  // header is built before the first byte is written.
  plan_stored(path, tensors, store_dtype);
  write_file_atomically(path, [&](std::FILE* out) {
    encode_safetensors(path, tensors, metadata, store_dtype,
                       [out](const void* data, size_t size) { write_bytes(out, data, size); });
  });
}

SafetensorsFile parse_safetensors(const std::string& source, const uint8_t* bytes, size_t size) {
  check_file_size(source, size);
  const uint64_t header_bytes = load_u64_le(bytes);
  check_header_length(source, header_bytes, size);
  const uint64_t data_start = kLengthPrefixBytes + header_bytes;
  HeaderPlan plan =
      parse_header(source, reinterpret_cast<const char*>(bytes + kLengthPrefixBytes), header_bytes, size - data_start);
  SafetensorsFile file;
  file.metadata = std::move(plan.metadata);
  for (EntryPlan& entry : plan.entries) {
    Tensor tensor = Tensor::empty(entry.shape, entry.dtype);
    if (tensor.nbytes() > 0) std::memcpy(tensor.raw(), bytes + data_start + entry.begin, tensor.nbytes());
    file.tensors.push_back({std::move(entry.name), std::move(tensor)});
  }
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) throw_error(ErrorKind::kIo, path, std::string("cannot open for reading: ") + std::strerror(errno));
  struct stat info {};
  if (::fstat(::fileno(file.get()), &info) != 0) {
    throw_error(ErrorKind::kIo, path, std::string("cannot stat: ") + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) throw_error(ErrorKind::kIo, path, "not a regular file; expected a .safetensors file");
  const auto file_size = static_cast<uint64_t>(info.st_size);
  check_file_size(path, file_size);

  uint8_t prefix[kLengthPrefixBytes];
  read_exactly(path, file.get(), prefix, sizeof prefix);
  const uint64_t header_bytes = load_u64_le(prefix);
  check_header_length(path, header_bytes, file_size);
  std::string header(header_bytes, '\0');
  read_exactly(path, file.get(), header.data(), header.size());
  HeaderPlan plan = parse_header(path, header.data(), header.size(), file_size - kLengthPrefixBytes - header_bytes);

  SafetensorsFile result;
  result.metadata = std::move(plan.metadata);
  // The layout check guarantees the entries tile the data buffer in this
  // order, so the rest of the file reads front to back without seeking.
  for (EntryPlan& entry : plan.entries) {
    Tensor tensor = Tensor::empty(entry.shape, entry.dtype);
    read_exactly(path, file.get(), tensor.raw(), tensor.nbytes());
    result.tensors.push_back({std::move(entry.name), std::move(tensor)});
  }
  return result;
}

std::string describe_safetensors(const SafetensorsFile& file) {
  std::vector<std::vector<std::string>> rows = {
      {"name", "dtype", "shape", "elements", "bytes", "min", "max", "mean", ""}};
  int64_t parameters = 0;
  uint64_t bytes = 0;
  for (const NamedTensor& named : file.tensors) {
    rows.push_back(describe_row(named));
    parameters += named.tensor.numel();
    bytes += named.tensor.nbytes();
  }
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(widths[c] - row[c].size(), ' ');
      if (c > 0) line += "  ";
      line += c < 3 || c + 1 == row.size() ? row[c] + pad : pad + row[c];  // text left, numbers right
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  if (file.metadata.empty()) {
    out += "metadata: none\n";
  } else {
    out += "metadata:\n";
    for (const auto& [key, value] : file.metadata) out += "  " + key + ": " + value + "\n";
  }
  out += "total: " + std::to_string(file.tensors.size()) + " tensors, " + std::to_string(parameters) + " parameters, " +
         std::to_string(bytes) + " bytes\n";
  return out;
}

const std::string& required_metadata(const SafetensorsFile& file, const std::string& key, const std::string& source) {
  const auto it = file.metadata.find(key);
  if (it == file.metadata.end()) throw_error(ErrorKind::kFormat, source, "metadata '" + key + "' is missing");
  return it->second;
}

}  // namespace gradmesh::checkpoint
