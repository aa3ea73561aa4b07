// A subword tokenizer: SentencePiece (BPE), trained on a corpus by
// `gradmesh data prepare-text --vocab sentencepiece` or loaded from a model
// file, and kept in the token set as tokenizer.model so generation and
// serving decode with exactly the model training encoded with. The
// SentencePiece headers stay in the .cc: this header is included widely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::data {

class SubwordTokenizer {
 public:
  // A serialized SentencePiece model (a .model file's bytes). Error(kFormat)
  // naming `where` when it does not load.
  SubwordTokenizer(const std::string& model, const std::string& where);
  ~SubwordTokenizer();
  SubwordTokenizer(const SubwordTokenizer&) = delete;
  SubwordTokenizer& operator=(const SubwordTokenizer&) = delete;

  // Trains a BPE model of `vocab_size` pieces on `files` (each line a
  // sentence; at most a million sentences, sampled with `seed`), with byte
  // fallback, so any text encodes, and identity normalisation, so decoding
  // gives the text back. Returns the serialized model. Error(kConfig) when
  // SentencePiece refuses (the vocabulary too large for the corpus, ...).
  static std::string train(const std::vector<std::string>& files, int vocab_size, int threads, uint64_t seed);

  int vocab_size() const;
  const std::string& model() const { return model_; }
  std::vector<uint32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<uint32_t>& ids) const;

 private:
  struct Impl;
  std::string model_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradmesh::data
