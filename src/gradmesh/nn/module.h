// Module: a layer or a container of layers with named parameters.
//
// Parameter names follow PyTorch's state_dict: a child's parameters are
// prefixed with the child's name ("1.weight", "blocks.3.attn.qkv.bias"), so
// weights move between gradmesh and PyTorch unchanged. A module declares its
// parameters (shape + init) when constructed; nn::Model then places them all
// in one flat buffer and initialises them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradmesh/autograd/variable.h"
#include "gradmesh/nn/init.h"

namespace gradmesh::nn {

using autograd::Variable;

struct Parameter {
  Shape shape;
  InitSpec init;
  Variable var;  // bound by nn::Model to a view of its flat buffer
};

// Hooks around the units of a model: groups of parameters used together (a
// GPT's embeddings, each of its blocks, its head). ZeRO stage 3 keeps only a
// shard of every parameter and gathers a unit's parameters just before the
// unit runs, forward and backward, and frees them after.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(int unit) = 0;
  virtual void after_forward(int unit) = 0;
  // Called (when a tape records) as backward reaches the unit's last op, and after its first.
  virtual void before_backward(int unit) = 0;
  virtual void after_backward(int unit) = 0;
};

// Per-step values that some layers need (dropout masks), set by the trainer.
struct ForwardContext {
  uint64_t seed = 0;
  uint64_t step = 0;          // global optimizer step
  int64_t first_sample = 0;   // global index (within the global batch) of this rank's first row
  UnitHooks* unit_hooks = nullptr;  // ZeRO stage 3; null: every parameter is always present
};
ForwardContext& forward_context();

// f(x) as parameter unit `unit` of its model, between the calls of
// forward_context().unit_hooks (when set); a module that reports
// parameter_units() runs each of them through this.
Variable run_unit(int unit, const Variable& x, const std::function<Variable(const Variable&)>& f);

class Module {
 public:
  virtual ~Module() = default;
  virtual Variable forward(const Variable& x) = 0;
  // One line describing the layer, PyTorch style: "Linear(in_features=784, out_features=512)".
  virtual std::string describe() const = 0;

  // Appends (full name, parameter) in registration order, depth first.
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out);
  // Appends every module in the tree, depth first (this one first).
  void collect_modules(std::vector<Module*>& out);

  void set_training(bool training);
  bool training() const { return training_; }

  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const { return children_; }

  // The parameter units of this module, in the order forward runs them
  // (through run_unit). Empty (the default): the module does not split its
  // parameters, and nn::Model runs it whole as one unit.
  virtual std::vector<std::vector<Parameter*>> parameter_units() { return {}; }

  // The loss of this module's output against `labels` (summed over rows and
  // divided by `denominator`, 0 = the row count) and each row's predicted
  // class: cross-entropy and argmax over the output's columns. A model whose
  // output is split across ranks (a tensor-parallel vocabulary) overrides both.
  virtual Variable loss(const Variable& output, const std::vector<int32_t>& labels, float denominator);
  virtual void predict(const Variable& output, int32_t* classes);

 protected:
  Parameter& add_parameter(const std::string& name, const Shape& shape, const InitSpec& init);
  Module& add_child(const std::string& name, std::unique_ptr<Module> child);

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace gradmesh::nn
