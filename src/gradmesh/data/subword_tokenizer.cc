#include "gradmesh/data/subword_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "gradmesh/core/error.h"

namespace gradmesh::data {

struct SubwordTokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SubwordTokenizer::SubwordTokenizer(const std::string& model, const std::string& where)
    : model_(model), impl_(std::make_unique<Impl>()) {
  const sentencepiece::util::Status status = impl_->processor.LoadFromSerializedProto(model_);
  if (!status.ok()) throw_error(ErrorKind::kFormat, where, "not a SentencePiece model: " + status.ToString());
}

SubwordTokenizer::~SubwordTokenizer() = default;

std::string SubwordTokenizer::train(const std::vector<std::string>& files, int vocab_size, int threads, uint64_t seed) {
  std::string inputs;
  for (const std::string& f : files) inputs += (inputs.empty() ? "" : ",") + f;
  // The sample of sentences is SentencePiece's own draw: seeded, so the same
  // corpus and seed give the same model.
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned>(seed));
  const std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", "bpe"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"character_coverage", "1.0"},
      {"input_sentence_size", "1000000"},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},
  };
  std::string model;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model);
  if (!status.ok()) throw_error(ErrorKind::kConfig, "--vocab sentencepiece", "training failed: " + status.ToString());
  return model;
}

int SubwordTokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

std::vector<uint32_t> SubwordTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = impl_->processor.Encode(text, &ids);
  if (!status.ok()) throw_error(ErrorKind::kFormat, "SentencePiece", "cannot encode: " + status.ToString());
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

std::string SubwordTokenizer::decode(const std::vector<uint32_t>& ids) const {
  const std::vector<int> pieces(ids.begin(), ids.end());
  std::string text;
  const sentencepiece::util::Status status = impl_->processor.Decode(pieces, &text);
  if (!status.ok()) throw_error(ErrorKind::kFormat, "SentencePiece", "cannot decode: " + status.ToString());
  return text;
}

}  // namespace gradmesh::data
