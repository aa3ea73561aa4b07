// Tokenised text for language models: a directory written by
// `gradmesh data prepare-text` and read by training.
//
//   <dir>/vocab.json   {"format": "gradmesh-tokens", "version": 1,
//                       "kind": "byte" | "char", "vocab_size": V,
//                       "chars": [code points, for "char"],
//                       "train_tokens": n, "val_tokens": m}
//   <dir>/train.bin    n tokens, uint16 little-endian
//   <dir>/val.bin      m tokens, uint16 little-endian
//
// "byte": each byte of the UTF-8 text is a token (V = 256). "char": each
// Unicode code point that occurs in the corpus is a token, numbered in code
// point order (V = the number of distinct ones, at most 65536). The
// validation split is the last part of the token stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::data {

enum class Vocabulary { kByte, kChar };

struct TokenSet {
  Vocabulary kind = Vocabulary::kByte;
  int vocab_size = 256;
  std::vector<uint32_t> chars;  // kChar: token -> code point
  std::vector<uint16_t> train, val;
};

struct PrepareTextOptions {
  std::vector<std::string> inputs;  // files, or directories (their regular files, sorted; *.dat and links skipped)
  Vocabulary kind = Vocabulary::kByte;
  double val_fraction = 0.1;        // in [0, 0.5]
};

// Tokenises the inputs. Missing or unreadable inputs are Error(kIo) naming
// them; text that is not UTF-8 with kChar is Error(kFormat) naming the file
// and byte offset; an empty corpus or too small a split is Error(kConfig).
TokenSet tokenize_text(const PrepareTextOptions& options);

// Writes the directory (created if needed; each file atomically).
void write_token_set(const TokenSet& tokens, const std::string& dir);

// Reads and validates a directory: a missing file is Error(kIo); a
// malformed vocab.json (bad JSON, missing or ill-typed key, unknown kind or
// version), a .bin whose size disagrees with it or a token >= vocab_size is
// Error(kFormat) naming the file and what was expected.
TokenSet read_token_set(const std::string& dir);

// Tokens of `text` in `vocab` (a prompt). With kChar, text that is not UTF-8
// is Error(kFormat) and a character the vocabulary lacks is Error(kConfig),
// both naming `source` and the byte offset.
std::vector<uint16_t> encode_text(const TokenSet& vocab, const std::string& text, const std::string& source);

// Text of tokens (kChar: UTF-8 of the code points; kByte: the bytes).
std::string detokenize(const TokenSet& vocab, const std::vector<uint16_t>& tokens);

}  // namespace gradmesh::data
