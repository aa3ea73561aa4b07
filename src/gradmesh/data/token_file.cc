#include "gradmesh/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gradmesh/core/atomic_file.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/resource_usage.h"
#include "gradmesh/core/utf8.h"
#include "gradmesh/data/sample_workers.h"
#include "gradmesh/data/subword_tokenizer.h"

namespace gradmesh::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "gradmesh-tokens";
constexpr int kVersion = 1;

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kIo, path, "cannot open");
  std::ostringstream out;
  out << in.rdbuf();
  count_io(IoCounter::kDatasetRead, static_cast<uint64_t>(out.tellp()));
  return out.str();
}

// The files a list of inputs names, in a fixed order.
std::vector<std::string> input_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (fs::is_regular_file(input, ec)) {
      files.push_back(input);
    } else if (fs::is_directory(input, ec)) {
      std::vector<std::string> here;
      for (const fs::directory_entry& e : fs::recursive_directory_iterator(input, ec)) {
        // fortune's .dat index files are binary; its .u8 names are links to the texts.
        if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
        here.push_back(e.path().string());
      }
      std::sort(here.begin(), here.end());
      files.insert(files.end(), here.begin(), here.end());
    } else {
      throw_error(ErrorKind::kIo, input, "does not exist (expected a text file or a directory of them)");
    }
  }
  return files;
}

// Appends the code points of UTF-8 `text`; Error(kFormat) at the first invalid sequence.
void decode_utf8(const std::string& text, const std::string& source, std::vector<uint32_t>& out) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    int extra = b < 0x80 ? 0 : (b >> 5) == 0x6 ? 1 : (b >> 4) == 0xE ? 2 : (b >> 3) == 0x1E ? 3 : -1;
    uint32_t cp = extra == 0 ? b : extra == 1 ? (b & 0x1Fu) : extra == 2 ? (b & 0x0Fu) : (b & 0x07u);
    bool ok = extra >= 0 && i + static_cast<size_t>(extra) < text.size() + (extra == 0 ? 1 : 0);
    for (int k = 1; ok && k <= extra; ++k) {
      const auto c = static_cast<unsigned char>(text[i + static_cast<size_t>(k)]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    if (!ok || cp > 0x10FFFF)
      throw_error(ErrorKind::kFormat, source,
                  "byte " + std::to_string(i) + " is not valid UTF-8 (use --vocab byte for arbitrary bytes)");
    out.push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
}

std::string tokens_bytes(const TokenStream& tokens, int width) {
  std::string bytes(static_cast<size_t>(tokens.size() * width), '\0');
  for (int64_t i = 0; i < tokens.size(); ++i)
    for (int b = 0; b < width; ++b) bytes[static_cast<size_t>(i * width + b)] = static_cast<char>((tokens[i] >> (8 * b)) & 0xFF);
  return bytes;
}

// The value of `key` in vocab.json, of the JSON type `type` names; Error(kFormat) otherwise.
const json& field(const json& j, const char* key, json::value_t type, const std::string& path) {
  const auto it = j.find(key);
  const bool ok = it != j.end() && (it->type() == type || (type == json::value_t::number_integer &&
                                                            it->type() == json::value_t::number_unsigned));
  if (!ok) {
    const char* what = type == json::value_t::string ? "a string" : type == json::value_t::array ? "an array"
                                                                                                  : "an integer";
    throw_error(ErrorKind::kFormat, path, std::string("key \"") + key + "\" must be " + what);
  }
  return *it;
}

}  // namespace

namespace {

// The corpus as subword pieces: the tokenizer loaded or trained, then every
// file encoded on its own (on o.threads threads) and the ids concatenated in
// file order, so the result does not depend on the thread count.
std::vector<uint32_t> sentencepiece_tokens(const PrepareTextOptions& o, const std::vector<std::string>& files,
                                           TokenSet& set) {
  const std::string model = o.tokenizer_model.empty()
                                ? SubwordTokenizer::train(files, o.vocab_size, o.threads, o.seed)
                                : read_whole(o.tokenizer_model);
  set.tokenizer = std::make_shared<const SubwordTokenizer>(model, o.tokenizer_model.empty() ? "--vocab sentencepiece"
                                                                                            : o.tokenizer_model);
  set.vocab_size = set.tokenizer->vocab_size();
  std::vector<std::vector<uint32_t>> per_file(files.size());
  SampleWorkers workers(std::max(1, o.threads));
  workers.run(static_cast<int64_t>(files.size()), [&](int64_t f) {
    per_file[static_cast<size_t>(f)] = set.tokenizer->encode(read_whole(files[static_cast<size_t>(f)]));
  });
  std::vector<uint32_t> ids;
  for (const std::vector<uint32_t>& f : per_file) ids.insert(ids.end(), f.begin(), f.end());
  return ids;
}

// Byte or character tokens of the corpus; for characters, set.chars gets the vocabulary.
std::vector<uint32_t> unit_tokens(const PrepareTextOptions& o, const std::vector<std::string>& files, TokenSet& set) {
  std::vector<uint32_t> units;
  for (const std::string& file : files) {
    const std::string text = read_whole(file);
    if (o.kind == Vocabulary::kChar) decode_utf8(text, file, units);
    else for (char c : text) units.push_back(static_cast<unsigned char>(c));
  }
  if (o.kind != Vocabulary::kChar) return units;
  set.chars = units;
  std::sort(set.chars.begin(), set.chars.end());
  set.chars.erase(std::unique(set.chars.begin(), set.chars.end()), set.chars.end());
  if (set.chars.size() > 65536)
    throw_error(ErrorKind::kConfig, "--vocab char", "the corpus has more than 65536 distinct characters");
  std::map<uint32_t, uint32_t> index;
  for (size_t t = 0; t < set.chars.size(); ++t) index[set.chars[t]] = static_cast<uint32_t>(t);
  for (uint32_t& u : units) u = index[u];
  set.vocab_size = static_cast<int>(set.chars.size());
  return units;
}

}  // namespace

TokenSet tokenize_text(const PrepareTextOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction <= 0.5))
    throw_error(ErrorKind::kConfig, "--val-fraction", "expected a number in [0, 0.5]");
  const std::vector<std::string> files = input_files(o.inputs);
  TokenSet set;
  set.kind = o.kind;
  const std::vector<uint32_t> tokens =
      o.kind == Vocabulary::kSentencePiece ? sentencepiece_tokens(o, files, set) : unit_tokens(o, files, set);
  if (tokens.size() < 2) throw_error(ErrorKind::kConfig, "--input", "the corpus holds fewer than 2 tokens");
  const auto val = static_cast<size_t>(static_cast<double>(tokens.size()) * o.val_fraction);
  const auto split = static_cast<std::ptrdiff_t>(tokens.size() - val);
  set.train = TokenStream(std::vector<uint32_t>(tokens.begin(), tokens.begin() + split));
  set.val = TokenStream(std::vector<uint32_t>(tokens.begin() + split, tokens.end()));
  return set;
}

TokenStream::TokenStream(std::vector<uint32_t> tokens) {
  auto held = std::make_shared<const std::vector<uint32_t>>(std::move(tokens));
  bytes_ = reinterpret_cast<const unsigned char*>(held->data());  // little-endian host: read as 4-byte tokens
  count_ = static_cast<int64_t>(held->size());
  width_ = 4;
  storage_ = std::move(held);
}

TokenStream TokenStream::map_file(const std::string& path, int64_t count, int width, const std::string& expected_by) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error(ErrorKind::kIo, path, "cannot open");
  struct stat st {};
  ::fstat(fd, &st);
  if (st.st_size != count * width) {
    ::close(fd);
    throw_error(ErrorKind::kFormat, path,
                "holds " + std::to_string(st.st_size) + " bytes; " + expected_by + " says " + std::to_string(count) +
                    " tokens of " + std::to_string(width) + " bytes each");
  }
  TokenStream t;
  t.count_ = count;
  t.width_ = width;
  t.path_ = path;
  if (count > 0) {
    void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      ::close(fd);
      throw_error(ErrorKind::kIo, path, "cannot be mapped");
    }
    const auto size = static_cast<size_t>(st.st_size);
    t.storage_ = std::shared_ptr<const void>(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
    t.bytes_ = static_cast<const unsigned char*>(map);
  }
  ::close(fd);
  return t;
}

std::vector<uint32_t> TokenStream::to_vector() const {
  std::vector<uint32_t> out(static_cast<size_t>(count_));
  for (int64_t i = 0; i < count_; ++i) out[static_cast<size_t>(i)] = (*this)[i];
  return out;
}

void write_token_set(const TokenSet& t, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_error(ErrorKind::kIo, dir, "cannot create: " + ec.message());
  const int width = t.vocab_size > 65536 ? 4 : 2;
  write_file_atomically(dir + "/train.bin", tokens_bytes(t.train, width));
  write_file_atomically(dir + "/val.bin", tokens_bytes(t.val, width));
  const char* kind = t.kind == Vocabulary::kChar ? "char" : t.kind == Vocabulary::kSentencePiece ? "sentencepiece" : "byte";
  json vocab = {{"format", kFormat},
                {"version", kVersion},
                {"kind", kind},
                {"vocab_size", t.vocab_size},
                {"dtype", width == 4 ? "uint32" : "uint16"},
                {"train_tokens", t.train.size()},
                {"val_tokens", t.val.size()}};
  if (t.kind == Vocabulary::kChar) vocab["chars"] = t.chars;
  if (t.kind == Vocabulary::kSentencePiece) {
    vocab["tokenizer"] = "tokenizer.model";
    write_file_atomically(dir + "/tokenizer.model", t.tokenizer->model());
  }
  // Written last: a directory without it is not a token set.
  write_file_atomically(dir + "/vocab.json", vocab.dump(1) + "\n");
}

namespace {

// nanoGPT's layout: train.bin and val.bin of uint16 ids, the vocabulary size the model's.
TokenSet read_nanogpt_set(const std::string& dir, int vocab_size) {
  if (vocab_size < 1)
    throw_error(ErrorKind::kConfig, "model.vocab_size",
                "'" + dir + "' is a nanoGPT data directory (train.bin without vocab.json): its vocabulary size is "
                "not recorded, so set model.vocab_size (50304 for GPT-2's tokenizer as nanoGPT pads it)");
  TokenSet t;
  t.kind = Vocabulary::kIds;
  t.vocab_size = vocab_size;
  for (const char* split : {"train", "val"}) {
    const std::string path = dir + "/" + split + ".bin";
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(fs::file_size(path, ec));
    if (ec) throw_error(ErrorKind::kIo, path, "cannot open");
    if (bytes % 2 != 0) throw_error(ErrorKind::kFormat, path, "holds an odd number of bytes; nanoGPT writes uint16 ids");
    (split[0] == 't' ? t.train : t.val) = TokenStream::map_file(path, bytes / 2, 2, "its size");
  }
  return t;
}

}  // namespace

TokenSet read_token_set(const std::string& dir, int vocab_size) {
  const std::string path = dir + "/vocab.json";
  if (!fs::exists(path) && fs::exists(dir + "/train.bin")) return read_nanogpt_set(dir, vocab_size);
  json j;
  try {
    j = json::parse(read_whole(path));
  } catch (const json::parse_error& e) {
    throw_error(ErrorKind::kFormat, path, std::string("is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw_error(ErrorKind::kFormat, path, "expected a JSON object");
  if (field(j, "format", json::value_t::string, path) != kFormat)
    throw_error(ErrorKind::kFormat, path, std::string("\"format\" must be \"") + kFormat + "\"");
  if (field(j, "version", json::value_t::number_integer, path) != kVersion)
    throw_error(ErrorKind::kFormat, path, "unsupported \"version\" (this gradmesh reads version 1)");
  TokenSet t;
  const std::string kind = field(j, "kind", json::value_t::string, path);
  if (kind != "byte" && kind != "char" && kind != "sentencepiece")
    throw_error(ErrorKind::kFormat, path, "\"kind\" must be \"byte\", \"char\" or \"sentencepiece\"");
  t.kind = kind == "char" ? Vocabulary::kChar : kind == "sentencepiece" ? Vocabulary::kSentencePiece : Vocabulary::kByte;
  const int64_t size = field(j, "vocab_size", json::value_t::number_integer, path);
  const int64_t n_train = field(j, "train_tokens", json::value_t::number_integer, path);
  const int64_t n_val = field(j, "val_tokens", json::value_t::number_integer, path);
  const std::string dtype = j.contains("dtype") ? field(j, "dtype", json::value_t::string, path).get<std::string>() : "uint16";
  if (dtype != "uint16" && dtype != "uint32") throw_error(ErrorKind::kFormat, path, "\"dtype\" must be \"uint16\" or \"uint32\"");
  const int width = dtype == "uint32" ? 4 : 2;
  if (size < 1 || size > (width == 2 ? 65536 : (int64_t{1} << 24)) || (t.kind == Vocabulary::kByte && size != 256))
    throw_error(ErrorKind::kFormat, path,
                "\"vocab_size\" must be 256 for bytes, 1..65536 for uint16 tokens, at most 2^24 for uint32");
  if (n_train < 1 || n_val < 0) throw_error(ErrorKind::kFormat, path, "token counts must be >= 1 (train), >= 0 (val)");
  t.vocab_size = static_cast<int>(size);
  if (t.kind == Vocabulary::kChar) {
    for (const json& c : field(j, "chars", json::value_t::array, path)) {
      if (!c.is_number_unsigned() || c.get<uint64_t>() > 0x10FFFF)
        throw_error(ErrorKind::kFormat, path, "\"chars\" must hold Unicode code points");
      t.chars.push_back(c.get<uint32_t>());
    }
    if (static_cast<int64_t>(t.chars.size()) != size)
      throw_error(ErrorKind::kFormat, path, "\"chars\" must hold vocab_size code points");
  }
  if (t.kind == Vocabulary::kSentencePiece) {
    t.tokenizer = std::make_shared<const SubwordTokenizer>(read_whole(dir + "/tokenizer.model"), dir + "/tokenizer.model");
    if (t.tokenizer->vocab_size() != size)
      throw_error(ErrorKind::kFormat, path, "\"vocab_size\" is " + std::to_string(size) + " but tokenizer.model has " +
                                                std::to_string(t.tokenizer->vocab_size()) + " pieces");
  }
  t.train = TokenStream::map_file(dir + "/train.bin", n_train, width, "vocab.json");
  t.val = TokenStream::map_file(dir + "/val.bin", n_val, width, "vocab.json");
  return t;
}

std::vector<uint32_t> encode_text(const TokenSet& vocab, const std::string& text, const std::string& source) {
  std::vector<uint32_t> tokens;
  if (vocab.kind == Vocabulary::kByte) {
    for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
    return tokens;
  }
  if (vocab.kind == Vocabulary::kSentencePiece) return vocab.tokenizer->encode(text);
  if (vocab.kind == Vocabulary::kIds)
    throw_error(ErrorKind::kConfig, source,
                "the token set is a nanoGPT directory of ids without a tokenizer: text cannot be encoded");
  std::vector<uint32_t> units;
  decode_utf8(text, source, units);
  for (size_t i = 0; i < units.size(); ++i) {
    const auto it = std::lower_bound(vocab.chars.begin(), vocab.chars.end(), units[i]);
    if (it == vocab.chars.end() || *it != units[i]) {
      std::string shown;
      append_utf8(units[i], shown);
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(units[i]));
      throw_error(ErrorKind::kConfig, source,
                  "character " + std::to_string(i) + " ('" + shown + "', " + code +
                      ") is not in the vocabulary (" + std::to_string(vocab.chars.size()) +
                      " characters of the training corpus)");
    }
    tokens.push_back(static_cast<uint32_t>(it - vocab.chars.begin()));
  }
  return tokens;
}

std::string detokenize(const TokenSet& vocab, const std::vector<uint32_t>& tokens) {
  if (vocab.kind == Vocabulary::kSentencePiece) return vocab.tokenizer->decode(tokens);
  std::string out;
  for (const uint32_t t : tokens) {
    if (vocab.kind == Vocabulary::kByte) out += static_cast<char>(t);
    else if (vocab.kind == Vocabulary::kIds) out += (out.empty() ? "" : " ") + std::to_string(t);
    else if (t < vocab.chars.size()) append_utf8(vocab.chars[t], out);
  }
  return out;
}

}  // namespace gradmesh::data
