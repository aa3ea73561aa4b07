#include "gradmesh/nn/module.h"

namespace gradmesh::nn {

ForwardContext& forward_context() {
  thread_local ForwardContext context;
  return context;
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

Parameter& Module::add_parameter(const std::string& name, const Shape& shape, const InitSpec& init) {
  params_.emplace_back(name, std::make_unique<Parameter>(Parameter{shape, init, Variable()}));
  return *params_.back().second;
}

Module& Module::add_child(const std::string& name, std::unique_ptr<Module> child) {
  children_.emplace_back(name, std::move(child));
  return *children_.back().second;
}

}  // namespace gradmesh::nn
