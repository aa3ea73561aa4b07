#include "gradmesh/autograd/tape.h"

#include "gradmesh/core/error.h"
#include "gradmesh/kernels/activation.h"

namespace gradmesh::autograd {

Variable::Variable(Tensor value, bool requires_grad) : state_(std::make_shared<VariableState>()) {
  state_->value = std::move(value);
  state_->requires_grad = requires_grad;
}

GradTarget grad_target(VariableState& v) {
  if (!v.grad.defined()) v.grad = Tensor::empty(v.value.shape());
  const bool accumulate = v.grad_written;
  v.grad_written = true;
  return {v.grad.data(), accumulate};
}

void pass_gradient(VariableState& v, Tensor& grad) {
  if (!v.grad_written && v.param_index < 0) {
    v.grad = grad.view(v.value.shape());
    v.grad_written = true;
    grad = Tensor();
    return;
  }
  GradTarget t = grad_target(v);
  kernels::add_into(t.data, grad.data(), grad.numel(), t.accumulate);
}

void Tape::record(std::vector<std::shared_ptr<VariableState>> inputs, std::shared_ptr<VariableState> output,
                  std::function<void()> backward) {
  for (const auto& input : inputs)
    if (input->param_index >= 0) ++input->pending_uses;
  output->requires_grad = true;
  ops_.push_back(Op{std::move(inputs), std::move(output), std::move(backward)});
}

void Tape::record_hook(std::function<void()> hook) {
  ops_.push_back(Op{{}, std::make_shared<VariableState>(), std::move(hook), /*always=*/true});
}

void Tape::backward(const Variable& loss, const GradReadyHook& hook) {
  if (!loss.requires_grad() || loss.value().numel() != 1)
    throw_error(ErrorKind::kShape, "backward", "loss must be a recorded scalar, got shape " + shape_str(loss.shape()));
  VariableState& root = *loss.state();
  GradTarget seed = grad_target(root);
  seed.data[0] = seed.accumulate ? seed.data[0] + 1.0f : 1.0f;

  run_backward(hook);
  clear();
}

void Tape::backward_from(const Variable& output, const Tensor& grad) {
  VariableState& root = *output.state();
  GRADMESH_CHECK(root.value.shape() == grad.shape(), "backward_from: gradient " + shape_str(grad.shape()) +
                                                        " for an output of " + shape_str(root.value.shape()));
  GradTarget seed = grad_target(root);
  const float* g = grad.data();
  for (int64_t i = 0; i < grad.numel(); ++i) seed.data[i] = seed.accumulate ? seed.data[i] + g[i] : g[i];
  run_backward({});
  ops_.clear();  // every use was counted down: nothing to reset
}

void Tape::run_backward(const GradReadyHook& hook) {
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    Op& op = *it;
    // An output no gradient reached contributes nothing; skipping it is exact.
    if (op.output->grad_written || op.always) op.backward();
    // Intermediate gradients are dead once their producer has run: release the
    // storage now so the next op reuses it from the allocator cache.
    if (op.output->param_index < 0) {
      op.output->grad = Tensor();
      op.output->grad_written = false;
    }
    for (const auto& input : op.inputs) {
      if (input->param_index >= 0 && --input->pending_uses == 0 && hook) hook(input->param_index);
    }
  }
}

void Tape::clear() {
  for (Op& op : ops_)
    for (const auto& input : op.inputs)
      if (input->param_index >= 0) input->pending_uses = 0;
  ops_.clear();
}

namespace {
thread_local Tape t_tape;
thread_local Tape* t_current = &t_tape;
thread_local bool t_grad_enabled = true;
}  // namespace

Tape& current_tape() { return *t_current; }

TapeScope::TapeScope(Tape& tape) : previous_(t_current) { t_current = &tape; }
TapeScope::~TapeScope() { t_current = previous_; }
bool grad_enabled() { return t_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool should_record(std::initializer_list<const Variable*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Variable* v : inputs)
    if (v && v->defined() && v->requires_grad()) return true;
  return false;
}

}  // namespace gradmesh::autograd
