#include "gradmesh/nn/module.h"

#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/kernels/loss.h"

namespace gradmesh::nn {

ForwardContext& forward_context() {
  thread_local ForwardContext context;
  return context;
}

Variable run_unit(int unit, const Variable& x, const std::function<Variable(const Variable&)>& f) {
  UnitHooks* hooks = forward_context().unit_hooks;
  if (!hooks) return f(x);
  hooks->before_forward(unit);
  autograd::Tape& tape = autograd::current_tape();
  // Backward replays the tape in reverse: a hook recorded before the unit's
  // ops runs after their backward, one recorded after them runs before.
  const bool recording = autograd::grad_enabled();
  if (recording) tape.record_hook([hooks, unit] { hooks->after_backward(unit); });
  Variable y = f(x);
  hooks->after_forward(unit);
  if (recording) tape.record_hook([hooks, unit] { hooks->before_backward(unit); });
  return y;
}

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out) {
  for (auto& [name, param] : params_) out.emplace_back(prefix + name, param.get());
  for (auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

void Module::collect_modules(std::vector<Module*>& out) {
  out.push_back(this);
  for (auto& [name, child] : children_) child->collect_modules(out);
}

void Module::set_training(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->set_training(training);
}

Variable Module::loss(const Variable& output, const std::vector<int32_t>& labels, float denominator) {
  return autograd::cross_entropy(output, labels, denominator);
}

void Module::predict(const Variable& output, int32_t* classes) {
  kernels::argmax_rows(output.value().data(), output.shape()[0], output.shape()[1], classes);
}

Parameter& Module::add_parameter(const std::string& name, const Shape& shape, const InitSpec& init) {
  params_.emplace_back(name, std::make_unique<Parameter>(Parameter{shape, init, Variable()}));
  return *params_.back().second;
}

Module& Module::add_child(const std::string& name, std::unique_ptr<Module> child) {
  children_.emplace_back(name, std::move(child));
  return *children_.back().second;
}

}  // namespace gradmesh::nn
