// TensorSplit: how a model splits its layers across a tensor-parallel group.
//
// The layers live in nn/, the group in comm/, and nn may not depend on comm
// (architecture.md), so a model that supports tensor parallelism (the GPT)
// asks this interface for its split layers and the few collectives between
// them; parallel/tensor_parallel.h implements it over a process group. A
// model built without one (nullptr) is whole.
//
// Every split layer keeps the unsplit layer's parameter names and their
// place in the parameter list; only the shapes are the rank's piece, and
// the values start as that piece of the unsplit init (nn::InitShard).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gradmesh/autograd/variable.h"
#include "gradmesh/nn/init.h"

namespace gradmesh::nn {

class Module;

class TensorSplit {
 public:
  virtual ~TensorSplit() = default;
  virtual int degree() const = 0;  // ranks in the group
  virtual int index() const = 0;   // this rank's place in it

  // Linear layers with their output features split (`row_blocks` equal blocks
  // split separately: attention's packed q, k, v) or their input features split.
  virtual std::unique_ptr<Module> column_linear(int64_t in, int64_t out, bool bias, int row_blocks,
                                                const InitSpec& weight, const InitSpec& bias_init) = 0;
  virtual std::unique_ptr<Module> row_linear(int64_t in, int64_t out, bool bias, const InitSpec& weight,
                                             const InitSpec& bias_init) = 0;
  // An embedding table split by rows (the vocabulary): looking up an id
  // gives its row from the rank that holds it, summed over the group.
  virtual std::unique_ptr<Module> vocab_embedding(int64_t rows, int64_t dim, const InitSpec& init) = 0;
  // The vocab_embedding module's local table, for a tied head.
  virtual autograd::Variable embedding_table(Module& vocab_embedding) = 0;
  virtual autograd::Variable lookup(Module& vocab_embedding, const std::vector<int64_t>& ids) = 0;

  // Identity forward, gradient summed over the group in backward (what a
  // replicated tensor needs before entering a split layer by hand).
  virtual autograd::Variable copy_to_group(const autograd::Variable& x) = 0;
  // Cross-entropy over logits split by columns ([rows, this rank's part of
  // the vocabulary]) without gathering them; the same on every rank.
  virtual autograd::Variable cross_entropy(const autograd::Variable& local_logits,
                                           const std::vector<int32_t>& labels, float denominator) = 0;
  // The global argmax of each row of split logits.
  virtual void argmax_rows(const autograd::Variable& local_logits, int32_t* out) = 0;
};

}  // namespace gradmesh::nn
