// Model: a module tree whose parameters live in one flat buffer.
//
// Parameter i occupies flat_params()[offset_i, offset_i + numel_i), in
// registration order; its gradient sits at the same offsets of flat_grads().
// The optimizer updates the whole buffer in one loop and the data-parallel
// reducer all-reduces contiguous slices of it, with no gather/scatter copies.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/nn/module.h"

namespace gradmesh::nn {

struct ParameterInfo {
  std::string name;  // PyTorch state_dict name
  Shape shape;
  int64_t offset;    // into the flat buffers, in elements
  int64_t numel;
};

// kDeferred leaves the values unwritten (their pages not even resident) until
// initialize_range() fills the pieces a rank will keep: ZeRO stage 3 never
// holds the whole model at start-up.
enum class ParameterInit { kNow, kDeferred };

class Model {
 public:
  // Places every parameter of `root` in the flat buffer and initialises it from `seed`.
  Model(std::unique_ptr<Module> root, uint64_t seed, ParameterInit init = ParameterInit::kNow);

  // The root's forward; a root without parameter units runs as unit 0.
  Variable forward(const Variable& x);
  Module& root() { return *root_; }
  void set_training(bool training) { root_->set_training(training); }

  const std::vector<ParameterInfo>& parameters() const { return info_; }
  int64_t num_parameters() const { return flat_params_.numel(); }
  Tensor& flat_params() { return flat_params_; }
  Tensor& flat_grads() { return flat_grads_; }

  // Writes the initial values of flat elements [begin, end), exactly as the
  // constructor's kNow would (element j of parameter i depends on (seed, i, j) only).
  void initialize_range(int64_t begin, int64_t end);

  // Starts a new gradient: the next backward overwrites instead of adding.
  // Not calling it between backward passes accumulates (gradient accumulation).
  void zero_grad();
  // Backpropagates `loss`. `hook(i)` fires as soon as parameter i's gradient is
  // final (unused parameters get a zero gradient and fire at the end).
  void backward(const Variable& loss, const autograd::GradReadyHook& hook = {});

  // Views of the parameters, by name, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // Copies named tensors into the parameters. Every parameter must be present
  // with the same shape (a split parameter: its whole shape, of which it
  // takes its piece), and no unknown name may appear unless `others_allowed`
  // (a pipeline stage reads its part of a whole model); `source` names the
  // file in errors. BF16 tensors are widened to float32.
  void load_parameters(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& source,
                       bool others_allowed = false);
  // Zeroes the gradients no backward wrote since zero_grad() (a pipeline
  // stage runs its backwards piecewise, without Model::backward).
  void zero_unwritten_grads();

  // The parameter indices of each unit, in forward order: the root's
  // parameter_units(), or one unit holding every parameter.
  std::vector<std::vector<int>> parameter_units();

  // A PyTorch-like printout of the layers and a parameter count.
  std::string summary();

 private:
  std::unique_ptr<Module> root_;
  uint64_t seed_;
  std::vector<ParameterInfo> info_;
  std::vector<Parameter*> params_;
  Tensor flat_params_;
  Tensor flat_grads_;
};

}  // namespace gradmesh::nn
