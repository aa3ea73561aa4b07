// The layers, with PyTorch's parameter shapes and names.
#pragma once

#include "gradmesh/autograd/ops.h"
#include "gradmesh/nn/module.h"

namespace gradmesh::nn {

using autograd::Activation;

// y = x W^T + b. weight [out, in], bias [out]. A following ReLU can be fused in (Sequential does it).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, InitKind init = InitKind::kPytorchDefault);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  void fuse_activation(Activation act) { fused_ = act; }
  Activation fused_activation() const { return fused_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 private:
  int64_t in_, out_;
  Parameter* weight_;  // [out, in]
  Parameter* bias_;    // [out] or null
  Activation fused_ = Activation::kNone;
};

// weight [OC, C, K, K], bias [OC]; input [N, C, H, W].
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, InitKind init = InitKind::kPytorchDefault);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  void fuse_activation(Activation act) { fused_ = act; }
  Activation fused_activation() const { return fused_; }
  // Channel-major ([C, N, H, W]) input/output, planned by Sequential.
  void set_layout(bool channel_major_input, bool channel_major_output) {
    channel_major_input_ = channel_major_input;
    channel_major_output_ = channel_major_output;
  }

 private:
  int64_t in_, out_, kernel_, stride_, padding_;
  Parameter* weight_;
  Parameter* bias_;
  Activation fused_ = Activation::kNone;
  bool channel_major_input_ = false;
  bool channel_major_output_ = false;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0 /* 0 = kernel */, int64_t padding = 0);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  void fuse_activation(Activation act) { fused_ = act; }
  Activation fused_activation() const { return fused_; }

 private:
  int64_t kernel_, stride_, padding_;
  Activation fused_ = Activation::kNone;
};

// ReLU, GELU (exact, erf) and Tanh.
class ActivationLayer : public Module {
 public:
  explicit ActivationLayer(Activation act) : act_(act) {}
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  Activation activation() const { return act_; }

 private:
  Activation act_;
};

// Zeroes each element with probability p while training (scaling the rest by 1/(1-p)).
class Dropout : public Module {
 public:
  explicit Dropout(float p);
  Variable forward(const Variable& x) override;
  std::string describe() const override;
  // Distinguishes the masks of several dropout layers in one step (set by Model).
  void set_layer_key(uint64_t key) { layer_key_ = key; }

 private:
  float p_;
  uint64_t layer_key_ = 0;
};

// Normalises the last dimension; weight [dim] (ones), bias [dim] (zeros).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  int64_t dim_;
  float eps_;
  Parameter* weight_;
  Parameter* bias_;
};

// weight [rows, dim] ~ N(0, 1). forward() reads token ids from x's float
// values (exact below 2^24) and returns [numel(x), dim]; lookup() takes ids directly.
class Embedding : public Module {
 public:
  Embedding(int64_t rows, int64_t dim);
  Variable forward(const Variable& x) override;
  Variable lookup(const std::vector<int64_t>& ids);
  std::string describe() const override;
  // The table, for a layer that shares it (a tied LM head).
  Parameter& weight() { return *weight_; }

 private:
  int64_t rows_, dim_;
  Parameter* weight_;
};

// Children named "0", "1", ... that the owner runs itself (PyTorch's
// nn.ModuleList): a container for names and parameters; forward() is an error.
class ModuleList : public Module {
 public:
  ModuleList& add(std::unique_ptr<Module> module);
  Module& operator[](size_t i) { return *children()[i].second; }
  size_t size() const { return children().size(); }
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "ModuleList"; }
};

// Named children that the owner runs itself (PyTorch's nn.ModuleDict).
class ModuleDict : public Module {
 public:
  template <class M>
  M& add(const std::string& name, std::unique_ptr<M> module) {
    M& ref = *module;
    add_child(name, std::move(module));
    return ref;
  }
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "ModuleDict"; }
};

// [N, ...] -> [N, prod(...)]
class Flatten : public Module {
 public:
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "Flatten()"; }
  // The input arrives channel-major ([C, N, H, W]) from a planned Conv2d.
  void set_channel_major_input(bool on) { channel_major_input_ = on; }

 private:
  bool channel_major_input_ = false;
};

// Children named "0", "1", ... run in order. fuse_activations() folds each
// ReLU into a neighbour's epilogue: into a MaxPool2d that directly follows it
// (relu(maxpool(x)) == maxpool(relu(x)), on 4x fewer elements), else into the
// Linear or Conv2d directly before it. It then lets each Conv2d whose output
// reaches another Conv2d or a Flatten through only pooling and activations
// (which ignore plane order) hand over channel-major activations, skipping
// two permutes per conv. Names and results are unchanged.
class Sequential : public Module {
 public:
  Sequential& add(std::unique_ptr<Module> layer);
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "Sequential"; }
  void fuse_activations();

 private:
  void plan_layouts();
  std::vector<bool> skipped_;
};

}  // namespace gradmesh::nn
