// Tokenised text for language models: a directory written by
// `gradmesh data prepare-text` and read by training.
//
//   <dir>/vocab.json   {"format": "gradmesh-tokens", "version": 1,
//                       "kind": "byte" | "char" | "sentencepiece", "vocab_size": V,
//                       "dtype": "uint16" | "uint32" (absent: uint16),
//                       "chars": [code points, for "char"],
//                       "train_tokens": n, "val_tokens": m}
//   <dir>/train.bin    n tokens, little-endian, of dtype
//   <dir>/val.bin      m tokens
//   <dir>/tokenizer.model   the SentencePiece model, for "sentencepiece"
//
// "byte": each byte of the UTF-8 text is a token (V = 256). "char": each
// Unicode code point that occurs in the corpus is a token, numbered in code
// point order. "sentencepiece": subword pieces (subword_tokenizer.h). The
// validation split is the last part of the token stream. Token ids are
// uint16 while V <= 65536, uint32 above.
//
// nanoGPT's data directories (train.bin and val.bin of uint16 GPT-2 token
// ids, no vocab.json) are read as they are, with the vocabulary size taken
// from the model's configuration.
//
// A set read for training is mapped, not loaded: pages come from the page
// cache, which the ranks of one machine share, and a rank touches only the
// windows it trains on (a token outside the vocabulary is reported when a
// window holding it is read, naming the file and the position).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gradmesh::data {

class SubwordTokenizer;

enum class Vocabulary { kByte, kChar, kSentencePiece, kIds };  // kIds: a nanoGPT set, ids without a tokenizer

// The tokens of one split, held in memory (just tokenised) or mapped from
// their .bin file. Copies share the tokens.
class TokenStream {
 public:
  TokenStream() = default;
  explicit TokenStream(std::vector<uint32_t> tokens);
  // Maps `path`, which must hold exactly `count` tokens of `width` (2 or 4)
  // bytes: Error(kFormat) naming it and `expected_by` (what said how many)
  // otherwise, Error(kIo) when it cannot be opened.
  static TokenStream map_file(const std::string& path, int64_t count, int width, const std::string& expected_by);

  int64_t size() const { return count_; }
  uint32_t operator[](int64_t i) const {
    const unsigned char* p = bytes_ + i * width_;
    return width_ == 2 ? static_cast<uint32_t>(p[0] | (p[1] << 8))
                       : static_cast<uint32_t>(p[0] | (p[1] << 8) | (p[2] << 16)) | (static_cast<uint32_t>(p[3]) << 24);
  }
  int width() const { return width_; }
  const std::string& path() const { return path_; }  // "" when held in memory
  std::vector<uint32_t> to_vector() const;

 private:
  std::shared_ptr<const void> storage_;  // the mapping or the vector
  const unsigned char* bytes_ = nullptr;
  int64_t count_ = 0;
  int width_ = 4;
  std::string path_;
};

struct TokenSet {
  Vocabulary kind = Vocabulary::kByte;
  int vocab_size = 256;
  std::vector<uint32_t> chars;                         // kChar: token -> code point
  std::shared_ptr<const SubwordTokenizer> tokenizer;   // kSentencePiece
  TokenStream train, val;
};

struct PrepareTextOptions {
  std::vector<std::string> inputs;  // files, or directories (their regular files at any depth, sorted; *.dat and links skipped)
  Vocabulary kind = Vocabulary::kByte;
  double val_fraction = 0.1;        // in [0, 0.5]
  // kSentencePiece: a model file to use, or else one of `vocab_size` pieces
  // trained on the inputs with `threads` threads and `seed`.
  std::string tokenizer_model;
  int vocab_size = 8000;
  int threads = 1;
  uint64_t seed = 0;
};

// Tokenises the inputs. Missing or unreadable inputs are Error(kIo) naming
// them; text that is not UTF-8 with kChar is Error(kFormat) naming the file
// and byte offset; an empty corpus or too small a split is Error(kConfig).
TokenSet tokenize_text(const PrepareTextOptions& options);

// Writes the directory (created if needed; each file atomically, vocab.json last).
void write_token_set(const TokenSet& tokens, const std::string& dir);

// Reads and validates a directory, mapping its .bin files: a missing file is
// Error(kIo); a malformed vocab.json (bad JSON, missing or ill-typed key,
// unknown kind, dtype or version) or a .bin whose size disagrees with it is
// Error(kFormat) naming the file and what was expected. A nanoGPT directory
// needs `vocab_size` > 0 (Error(kConfig) otherwise).
TokenSet read_token_set(const std::string& dir, int vocab_size = 0);

// Tokens of `text` in `vocab` (a prompt). With kChar, text that is not UTF-8
// is Error(kFormat) and a character the vocabulary lacks is Error(kConfig),
// both naming `source` and the byte offset; kIds has no tokenizer (Error(kConfig)).
std::vector<uint32_t> encode_text(const TokenSet& vocab, const std::string& text, const std::string& source);

// Text of tokens (kChar: UTF-8 of the code points; kByte: the bytes; kIds: the ids, space-separated).
std::string detokenize(const TokenSet& vocab, const std::vector<uint32_t>& tokens);

}  // namespace gradmesh::data
