#include "gradmesh/nn/model.h"

#include <algorithm>
#include <map>

#include "gradmesh/core/error.h"
#include "gradmesh/nn/layers.h"

namespace gradmesh::nn {

Model::Model(std::unique_ptr<Module> root, uint64_t seed, ParameterInit init) : root_(std::move(root)), seed_(seed) {
  std::vector<std::pair<std::string, Parameter*>> named;
  root_->collect_parameters("", named);
  int64_t total = 0;
  for (auto& [name, param] : named) {
    const int64_t n = shape_numel(param->shape);
    info_.push_back({name, param->shape, total, n});
    params_.push_back(param);
    total += n;
  }
  flat_params_ = Tensor::empty({total});
  // Not zero-filled: backward writes every gradient before anything reads
  // it (zero_grad() makes the next write overwrite), so the pages stay
  // untouched until used, and ZeRO's given-back pieces never become resident.
  flat_grads_ = Tensor::empty({total});
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    Tensor value = flat_params_.slice_flat(info_[i].offset, p.shape);
    if (init == ParameterInit::kNow) initialize(value, p.init, seed, p.init.index >= 0 ? p.init.index : i);
    p.var = Variable(value, /*requires_grad=*/true);
    p.var.state()->grad = flat_grads_.slice_flat(info_[i].offset, p.shape);
    p.var.state()->param_index = static_cast<int>(i);
  }
  std::vector<Module*> modules;
  root_->collect_modules(modules);
  uint64_t dropout_key = 0;
  for (Module* m : modules)
    if (auto* d = dynamic_cast<Dropout*>(m)) d->set_layer_key(dropout_key++);
}

void Model::initialize_range(int64_t begin, int64_t end) {
  GRADMESH_CHECK(begin >= 0 && begin <= end && end <= num_parameters(), "initialize_range outside the flat buffer");
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t first = std::max(begin, info_[i].offset), last = std::min(end, info_[i].offset + info_[i].numel);
    if (first >= last) continue;
    const InitSpec& spec = params_[i]->init;
    initialize_elements(flat_params_.data() + first, first - info_[i].offset, last - first, spec, seed_,
                        spec.index >= 0 ? static_cast<uint64_t>(spec.index) : i);
  }
}

Variable Model::forward(const Variable& x) {
  if (!forward_context().unit_hooks || !root_->parameter_units().empty()) return root_->forward(x);
  return run_unit(0, x, [this](const Variable& in) { return root_->forward(in); });
}

std::vector<std::vector<int>> Model::parameter_units() {
  std::vector<std::vector<Parameter*>> units = root_->parameter_units();
  std::vector<std::vector<int>> out;
  if (units.empty()) {
    out.emplace_back();
    for (size_t i = 0; i < params_.size(); ++i) out.back().push_back(static_cast<int>(i));
    return out;
  }
  std::map<const Parameter*, int> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i]] = static_cast<int>(i);
  for (const auto& unit : units) {
    out.emplace_back();
    for (const Parameter* p : unit) {
      auto it = index.find(p);
      GRADMESH_CHECK(it != index.end(), "a parameter unit names a parameter the model does not hold");
      out.back().push_back(it->second);
    }
  }
  return out;
}

void Model::zero_unwritten_grads() {
  for (Parameter* p : params_) {
    autograd::VariableState& s = *p->var.state();
    if (!s.grad_written) {
      s.grad.zero();
      s.grad_written = true;
    }
  }
}

void Model::zero_grad() {
  for (Parameter* p : params_) p->var.state()->grad_written = false;
}

void Model::backward(const Variable& loss, const autograd::GradReadyHook& hook) {
  auto finish = [this, &hook](int index) {
    // An op whose output got no gradient skips its backward, so a parameter
    // can become final without having been written: its gradient is zero.
    autograd::VariableState& s = *params_[index]->var.state();
    if (!s.grad_written) {
      s.grad.zero();
      s.grad_written = true;
    }
    if (hook) hook(index);
  };
  std::vector<bool> fired(params_.size(), false);
  autograd::current_tape().backward(loss, [&](int index) {
    fired[index] = true;
    finish(index);
  });
  for (size_t i = 0; i < params_.size(); ++i)
    if (!fired[i]) finish(static_cast<int>(i));
}

std::vector<std::pair<std::string, Tensor>> Model::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(info_[i].name, params_[i]->var.value());
  return out;
}

void Model::load_parameters(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& source,
                            bool others_allowed) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : tensors) by_name[name] = &t;
  std::vector<const Tensor*> found(params_.size(), nullptr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParameterInfo& info = info_[i];
    auto it = by_name.find(info.name);
    if (it == by_name.end())
      throw_error(ErrorKind::kFormat, source, "missing tensor '" + info.name + "' " + shape_str(info.shape) +
                                                  " that the model needs");
    // A split parameter (tensor parallelism) takes its piece of the whole tensor.
    const InitShard* shard = params_[i]->init.shard.get();
    const Shape expected = shard ? shard->full_shape : info.shape;
    if (it->second->shape() != expected)
      throw_error(ErrorKind::kFormat, source, "tensor '" + info.name + "' has shape " +
                                                  shape_str(it->second->shape()) + ", the model expects " +
                                                  shape_str(expected));
    found[i] = it->second;
    by_name.erase(it);
  }
  if (!by_name.empty() && !others_allowed)
    throw_error(ErrorKind::kFormat, source,
                "tensor '" + by_name.begin()->first + "' is not a parameter of this model (" +
                    std::to_string(by_name.size()) + " unexpected tensor(s); check model.kind and layer sizes)");
  // Copy only after every check passed, so a bad file never leaves half-loaded weights.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor whole = found[i]->dtype() == DType::kF32 ? *found[i] : found[i]->to(DType::kF32);
    const InitShard* shard = params_[i]->init.shard.get();
    params_[i]->var.value().copy_from(shard ? take_piece(whole, *shard) : whole);
  }
}

std::string Model::summary() {
  std::string out;
  for (const auto& [name, child] : root_->children()) out += "  (" + name + "): " + child->describe() + "\n";
  out += "parameters: " + std::to_string(num_parameters()) + " in " + std::to_string(info_.size()) + " tensors\n";
  return out;
}

}  // namespace gradmesh::nn
