// Variable: a tensor that may take part in reverse-mode differentiation.
//
// A Variable is a shared handle; ops record on the current Tape which
// Variables they read and wrote. Gradients are written, not zero-filled then
// added: the first backward write into a gradient overwrites it, later writes
// accumulate (`grad_written`). Parameters keep their gradient as a view into
// a flat buffer owned by the model, so the optimizer and the gradient
// all-reduce see one contiguous array.
#pragma once

#include <memory>
#include <string>

#include "gradmesh/core/tensor.h"

namespace gradmesh::autograd {

struct VariableState {
  Tensor value;
  Tensor grad;                // allocated on first write, or a view set by the owner (parameters)
  bool grad_written = false;  // false: the next backward write overwrites `grad`
  bool requires_grad = false;
  int param_index = -1;       // >= 0 for model parameters (index in the model's parameter list)
  int pending_uses = 0;       // recorded ops reading this parameter whose backward has not run yet
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false);

  bool defined() const { return state_ != nullptr; }
  const Tensor& value() const { return state_->value; }
  Tensor& value() { return state_->value; }
  const Shape& shape() const { return state_->value.shape(); }
  bool requires_grad() const { return state_ && state_->requires_grad; }
  // The gradient after backward (undefined if nothing flowed into it).
  const Tensor& grad() const { return state_->grad; }
  bool has_grad() const { return state_->grad_written; }

  const std::shared_ptr<VariableState>& state() const { return state_; }

 private:
  std::shared_ptr<VariableState> state_;
};

// Where a backward pass writes a gradient: the buffer and whether to add to it.
struct GradTarget {
  float* data;
  bool accumulate;
};
// Allocates the gradient if needed and marks it written; the caller must then
// write (accumulate=false) or add (accumulate=true) every element.
GradTarget grad_target(VariableState& v);

// Adds `grad` (an op's output gradient, dead once the op's backward is done)
// to v's gradient. When v's gradient is not yet written and v is not a
// parameter (whose gradient lives in the model's flat buffer), v takes the
// storage instead of a copy: reshapes and the residual stream's additions
// would otherwise copy a tenth of a GPT step. Leaves `grad` empty then.
void pass_gradient(VariableState& v, Tensor& grad);

}  // namespace gradmesh::autograd
