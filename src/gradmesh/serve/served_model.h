// A trained model as the server runs it: its name and version, the tensors
// it takes and gives (the metadata endpoint's inputs and outputs), and one
// forward pass over a batch of rows.
//
//   classifier (mlp, cnn)  input  "input"  FP32  [-1, C, H, W] (or [-1, C*H*W])
//                          output "logits" FP32  [-1, classes]
//                                 "class"  INT64 [-1]          (the argmax)
//   gpt                    input  "tokens" INT64 [-1, T], 1 <= T <= block_size
//                          output "logits" FP32  [-1, vocab]   (of each row's last position)
//                                 "next_token" INT64 [-1]      (their argmax)
//
// The model is in evaluation mode and runs without recording a tape, so
// several threads may run it at once (each has its own tape and context).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradmesh/nn/gpt.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/serve/generation.h"
#include "gradmesh/serve/infer_json.h"
#include "gradmesh/serve/sequence_model.h"

namespace gradmesh::serve {

struct TensorSpec {
  std::string name;
  Datatype datatype = Datatype::kFp32;
  Shape shape;  // -1: any size (the batch, a sequence length)
};

struct ModelShape {
  std::string kind;          // "mlp", "cnn", "gpt"
  Shape sample;              // classifier: {C, H, W}; gpt: {block_size}
  int64_t classes = 0;       // classifier: classes; gpt: the vocabulary
};

class ShardedGpt;

class ServedModel {
 public:
  ServedModel(std::string name, std::string version, ModelShape shape, std::unique_ptr<nn::Model> model);
  // A GPT split across processes (sharded_gpt.h): `part` is rank 0's stage
  // and shard; forward passes and generation go through `sharded`.
  ServedModel(std::string name, std::string version, ModelShape shape, std::unique_ptr<nn::Model> part,
              std::shared_ptr<ShardedGpt> sharded);
  ~ServedModel();

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const ModelShape& shape() const { return shape_; }
  TensorSpec input() const;
  std::vector<TensorSpec> outputs() const;

  // The request's input as the rows the model takes ([n, C, H, W] or [n, T]).
  // Error(kUsage) naming the input for a wrong name, datatype, shape, or a
  // token id outside the vocabulary.
  Tensor rows_of(const InferInput& input) const;
  // One forward pass: rows -> logits [n, classes]. Thread-safe.
  Tensor forward(const Tensor& rows) const;
  // A GPT's sequences, for generation (used by one thread at a time); null for other kinds.
  SequenceModel* sequences() const { return sequences_.get(); }
  // The sharded model, or null when the whole model is in this process.
  ShardedGpt* sharded() const { return sharded_.get(); }
  // Text <-> tokens for a GPT's generate endpoints; without one they answer 400.
  void set_codec(TextCodec codec) { codec_ = std::move(codec); }
  const TextCodec* codec() const { return codec_.encode ? &codec_ : nullptr; }

  // Error(kUsage) naming the first of `wanted` that is not an output of the model.
  void check_outputs(const std::vector<std::string>& wanted) const;
  // The outputs of `logits` [n, classes] the request asked for (all when
  // `wanted` is empty). REQUIRES: check_outputs(wanted) passed.
  std::vector<InferOutput> outputs_of(const Tensor& logits, const std::vector<std::string>& wanted) const;

 private:
  std::string name_, version_;
  ModelShape shape_;
  std::unique_ptr<nn::Model> model_;
  std::shared_ptr<ShardedGpt> sharded_;
  std::shared_ptr<SequenceModel> sequences_;
  TextCodec codec_;
};

}  // namespace gradmesh::serve
