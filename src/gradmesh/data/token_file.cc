#include "gradmesh/data/token_file.h"

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
      for (const fs::directory_entry& e : fs::directory_iterator(input, ec)) {
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

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string tokens_bytes(const std::vector<uint16_t>& tokens) {
  std::string bytes(tokens.size() * 2, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    bytes[2 * i] = static_cast<char>(tokens[i] & 0xFF);
    bytes[2 * i + 1] = static_cast<char>(tokens[i] >> 8);
  }
  return bytes;
}

std::vector<uint16_t> read_tokens(const std::string& path, int64_t expected, int vocab_size) {
  const std::string bytes = read_whole(path);
  if (static_cast<int64_t>(bytes.size()) != expected * 2)
    throw_error(ErrorKind::kFormat, path,
                "holds " + std::to_string(bytes.size()) + " bytes; vocab.json says " + std::to_string(expected) +
                    " tokens of 2 bytes each");
  std::vector<uint16_t> tokens(static_cast<size_t>(expected));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<uint16_t>(static_cast<unsigned char>(bytes[2 * i]) |
                                      (static_cast<unsigned char>(bytes[2 * i + 1]) << 8));
    if (tokens[i] >= vocab_size)
      throw_error(ErrorKind::kFormat, path,
                  "token " + std::to_string(i) + " is " + std::to_string(tokens[i]) + ", outside the vocabulary [0, " +
                      std::to_string(vocab_size) + ")");
  }
  return tokens;
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

TokenSet tokenize_text(const PrepareTextOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction <= 0.5))
    throw_error(ErrorKind::kConfig, "--val-fraction", "expected a number in [0, 0.5]");
  std::vector<uint32_t> units;
  for (const std::string& file : input_files(o.inputs)) {
    const std::string text = read_whole(file);
    if (o.kind == Vocabulary::kChar) decode_utf8(text, file, units);
    else for (char c : text) units.push_back(static_cast<unsigned char>(c));
  }
  if (units.size() < 2) throw_error(ErrorKind::kConfig, "--input", "the corpus holds fewer than 2 tokens");
  TokenSet set;
  set.kind = o.kind;
  std::map<uint32_t, uint16_t> index;
  if (o.kind == Vocabulary::kChar) {
    set.chars = units;
    std::sort(set.chars.begin(), set.chars.end());
    set.chars.erase(std::unique(set.chars.begin(), set.chars.end()), set.chars.end());
    if (set.chars.size() > 65536)
      throw_error(ErrorKind::kConfig, "--vocab char", "the corpus has more than 65536 distinct characters");
    for (size_t t = 0; t < set.chars.size(); ++t) index[set.chars[t]] = static_cast<uint16_t>(t);
    set.vocab_size = static_cast<int>(set.chars.size());
  }
  const auto val = static_cast<size_t>(static_cast<double>(units.size()) * o.val_fraction);
  const size_t train = units.size() - val;
  for (size_t i = 0; i < units.size(); ++i) {
    const uint16_t token = o.kind == Vocabulary::kChar ? index[units[i]] : static_cast<uint16_t>(units[i]);
    (i < train ? set.train : set.val).push_back(token);
  }
  return set;
}

void write_token_set(const TokenSet& t, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_error(ErrorKind::kIo, dir, "cannot create: " + ec.message());
  write_file_atomically(dir + "/train.bin", tokens_bytes(t.train));
  write_file_atomically(dir + "/val.bin", tokens_bytes(t.val));
  json vocab = {{"format", kFormat},
                {"version", kVersion},
                {"kind", t.kind == Vocabulary::kChar ? "char" : "byte"},
                {"vocab_size", t.vocab_size},
                {"train_tokens", t.train.size()},
                {"val_tokens", t.val.size()}};
  if (t.kind == Vocabulary::kChar) vocab["chars"] = t.chars;
  // Written last: a directory without it is not a token set.
  write_file_atomically(dir + "/vocab.json", vocab.dump(1) + "\n");
}

TokenSet read_token_set(const std::string& dir) {
  const std::string path = dir + "/vocab.json";
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
  if (kind != "byte" && kind != "char") throw_error(ErrorKind::kFormat, path, "\"kind\" must be \"byte\" or \"char\"");
  t.kind = kind == "char" ? Vocabulary::kChar : Vocabulary::kByte;
  const int64_t size = field(j, "vocab_size", json::value_t::number_integer, path);
  const int64_t n_train = field(j, "train_tokens", json::value_t::number_integer, path);
  const int64_t n_val = field(j, "val_tokens", json::value_t::number_integer, path);
  if (size < 1 || size > 65536 || (t.kind == Vocabulary::kByte && size != 256))
    throw_error(ErrorKind::kFormat, path, "\"vocab_size\" must be 256 for bytes, 1..65536 for characters");
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
  t.train = read_tokens(dir + "/train.bin", n_train, t.vocab_size);
  t.val = read_tokens(dir + "/val.bin", n_val, t.vocab_size);
  return t;
}

std::vector<uint16_t> encode_text(const TokenSet& vocab, const std::string& text, const std::string& source) {
  std::vector<uint16_t> tokens;
  if (vocab.kind == Vocabulary::kByte) {
    for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
    return tokens;
  }
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
    tokens.push_back(static_cast<uint16_t>(it - vocab.chars.begin()));
  }
  return tokens;
}

std::string detokenize(const TokenSet& vocab, const std::vector<uint16_t>& tokens) {
  std::string out;
  for (uint16_t t : tokens) {
    if (vocab.kind == Vocabulary::kByte) out += static_cast<char>(t);
    else if (t < vocab.chars.size()) append_utf8(vocab.chars[t], out);
  }
  return out;
}

}  // namespace gradmesh::data
