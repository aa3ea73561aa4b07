// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): one layer's matrices
// split across the ranks of a tensor-parallel group.
//
// A column-parallel linear keeps rows [r*out/tp, (r+1)*out/tp) of the weight
// (output features) and produces its slice of the output; a row-parallel
// linear keeps the matching input columns, multiplies its slice of the input
// and the partial products are summed over the group. Put one after the
// other (an MLP's c_fc then c_proj, attention's c_attn then c_proj with the
// heads divided among the ranks) they cost one all-reduce in forward (after
// the row-parallel layer) and one in backward (before the column-parallel
// layer, Megatron's "f"), and nothing in between.
//
// Every split parameter is initialised through nn::InitShard as the matching
// piece of the unsplit parameter, and keeps the unsplit parameter's place in
// the model's parameter list, so a split model starts with exactly the
// weights of the whole one. Parameters that are not split (LayerNorm, the
// row-parallel bias) are replicated: every rank of the group computes the
// same values and the same gradients for them.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gradmesh/autograd/variable.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/nn/init.h"
#include "gradmesh/nn/module.h"
#include "gradmesh/nn/tensor_split.h"

namespace gradmesh::parallel {

// Megatron's f: identity forward; backward sums the gradient over the group
// (each rank's column-parallel layer saw the same input and gives back only
// its part of the input's gradient).
autograd::Variable copy_to_tensor_parallel(const autograd::Variable& x, comm::ProcessGroup& group);

// Megatron's g with the bias: forward sums `partial` [..., out] over the group
// and adds `bias` [out] (may be undefined) once; backward passes the gradient
// through to every rank's partial and gives the bias the column sums.
autograd::Variable reduce_from_tensor_parallel(const autograd::Variable& partial, const autograd::Variable& bias,
                                               comm::ProcessGroup& group);

// Splits [0, n) into `parts` equal pieces; Error(kConfig) naming `what` when
// they are not equal (attention's heads must stay whole).
std::pair<int64_t, int64_t> even_part(int64_t n, int parts, int index, const std::string& what);
// Splits [0, n) into `parts` pieces whose sizes differ by at most one (the
// first n % parts get one more): features and vocabulary rows need not divide.
std::pair<int64_t, int64_t> balanced_part(int64_t n, int parts, int index);

// Cross-entropy over logits split by columns: `local_logits` [rows, end - begin]
// holds columns [begin, end) of the full [rows, V]; labels are full column
// indices. Forward: the row maxima, the sums of exponentials and the target
// logits are combined over the group (one max and one sum all-reduce), so no
// rank holds all logits; every rank gets the same loss. Backward: this rank's
// columns of softmax - one_hot, with no communication.
autograd::Variable vocab_parallel_cross_entropy(const autograd::Variable& local_logits, int64_t begin,
                                                const std::vector<int32_t>& labels, float denominator,
                                                comm::ProcessGroup& group);
// The full column of each row's largest logit (the first on ties, as argmax_rows).
void vocab_parallel_argmax(const Tensor& local_logits, int64_t begin, int32_t* out, comm::ProcessGroup& group);

// y [..., out/tp] = x [..., in] W_r^T + b_r. The output features are split
// balanced; `row_blocks` > 1 splits each of that many equal blocks of the
// output rows evenly (the packed q, k, v of attention's c_attn: each rank
// keeps its heads of each of the three).
class ColumnParallelLinear : public nn::Module {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<comm::ProcessGroup> group,
                       bool bias = true, nn::InitKind init = nn::InitKind::kPytorchDefault, int row_blocks = 1);
  autograd::Variable forward(const autograd::Variable& x) override;
  std::string describe() const override;
  nn::Parameter& weight() { return *weight_; }
  nn::Parameter* bias() { return bias_; }
  // The init of the unsplit layer (the GPT uses N(0, std) weights and zero biases).
  void set_init(const nn::InitSpec& weight, const nn::InitSpec& bias);

 private:
  int64_t in_, out_, local_out_;
  std::shared_ptr<comm::ProcessGroup> group_;
  std::shared_ptr<const nn::InitShard> weight_shard_, bias_shard_;
  nn::Parameter* weight_;  // [out/tp, in]
  nn::Parameter* bias_;    // [out/tp] or null
};

// y [..., out] = sum over the group of x_r [..., in/tp] W_r^T, plus b.
// The input is already split (the column-parallel layer's output).
class RowParallelLinear : public nn::Module {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<comm::ProcessGroup> group,
                    bool bias = true, nn::InitKind init = nn::InitKind::kPytorchDefault);
  autograd::Variable forward(const autograd::Variable& x) override;
  std::string describe() const override;
  nn::Parameter& weight() { return *weight_; }
  nn::Parameter* bias() { return bias_; }
  void set_init(const nn::InitSpec& weight, const nn::InitSpec& bias);

 private:
  int64_t in_, out_, local_in_;
  std::shared_ptr<comm::ProcessGroup> group_;
  std::shared_ptr<const nn::InitShard> weight_shard_;
  nn::Parameter* weight_;  // [out, in/tp]
  nn::Parameter* bias_;    // [out], replicated, or null
};

// An embedding table split by rows: rank r holds rows [begin, end) (balanced).
// lookup() gives each id's row from the rank holding it (zeros elsewhere),
// summed over the group: every rank gets the whole lookup.
class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(int64_t rows, int64_t dim, std::shared_ptr<comm::ProcessGroup> group,
                         const nn::InitSpec& init);
  autograd::Variable forward(const autograd::Variable& ids) override;  // ids as floats, any shape
  autograd::Variable lookup(const std::vector<int64_t>& ids);          // -> [ids.size(), dim]
  std::string describe() const override;
  nn::Parameter& weight() { return *weight_; }
  int64_t begin() const { return begin_; }

 private:
  int64_t rows_, dim_, begin_, end_;
  std::shared_ptr<comm::ProcessGroup> group_;
  nn::Parameter* weight_;  // [end - begin, dim]
};

// nn::TensorSplit over a process group: what the GPT asks for its split layers.
class GroupTensorSplit : public nn::TensorSplit {
 public:
  explicit GroupTensorSplit(std::shared_ptr<comm::ProcessGroup> group);
  int degree() const override { return group_->size(); }
  int index() const override { return group_->rank(); }
  std::unique_ptr<nn::Module> column_linear(int64_t in, int64_t out, bool bias, int row_blocks,
                                            const nn::InitSpec& weight, const nn::InitSpec& bias_init) override;
  std::unique_ptr<nn::Module> row_linear(int64_t in, int64_t out, bool bias, const nn::InitSpec& weight,
                                         const nn::InitSpec& bias_init) override;
  std::unique_ptr<nn::Module> vocab_embedding(int64_t rows, int64_t dim, const nn::InitSpec& init) override;
  autograd::Variable embedding_table(nn::Module& vocab_embedding) override;
  autograd::Variable lookup(nn::Module& vocab_embedding, const std::vector<int64_t>& ids) override;
  autograd::Variable copy_to_group(const autograd::Variable& x) override;
  autograd::Variable cross_entropy(const autograd::Variable& local_logits, const std::vector<int32_t>& labels,
                                   float denominator) override;
  void argmax_rows(const autograd::Variable& local_logits, int32_t* out) override;

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  // The vocabulary (vocab_embedding's rows): the split logits' first column
  // on this rank is balanced_part(vocab_rows_, ...).first, for the tied head
  // and for a column-parallel lm_head alike.
  int64_t vocab_rows_ = 0;
};

}  // namespace gradmesh::parallel
