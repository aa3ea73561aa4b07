#include "gradmesh/nn/layers.h"

#include "gradmesh/core/error.h"

namespace gradmesh::nn {
namespace {


void require_positive(const char* layer, const char* what, int64_t value) {
  if (value < 1)
    throw_error(ErrorKind::kConfig, layer, std::string(what) + " must be >= 1, got " + std::to_string(value));
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, InitKind init) : in_(in_features), out_(out_features) {
  require_positive("Linear", "in_features", in_features);
  require_positive("Linear", "out_features", out_features);
  weight_ = &add_parameter("weight", {out_, in_}, weight_init(init, in_, out_));
  bias_ = bias ? &add_parameter("bias", {out_}, bias_init(init, in_)) : nullptr;
}

Variable Linear::forward(const Variable& x) {
  return autograd::linear(x, weight_->var, bias_ ? bias_->var : Variable(), fused_);
}

std::string Linear::describe() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias_ ? "True" : "False") + ")" + (fused_ == Activation::kRelu ? " + fused ReLU" : "");
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride, int64_t padding, bool bias,
               InitKind init)
    : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding) {
  require_positive("Conv2d", "in_channels", in_channels);
  require_positive("Conv2d", "out_channels", out_channels);
  require_positive("Conv2d", "kernel_size", kernel);
  require_positive("Conv2d", "stride", stride);
  const int64_t fan_in = in_ * kernel_ * kernel_, fan_out = out_ * kernel_ * kernel_;
  weight_ = &add_parameter("weight", {out_, in_, kernel_, kernel_}, weight_init(init, fan_in, fan_out));
  bias_ = bias ? &add_parameter("bias", {out_}, bias_init(init, fan_in)) : nullptr;
}

Variable Conv2d::forward(const Variable& x) {
  return autograd::conv2d(x, weight_->var, bias_ ? bias_->var : Variable(),
                          {stride_, padding_, fused_, channel_major_input_, channel_major_output_});
}

std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + std::to_string(kernel_) +
         ", stride=" + std::to_string(stride_) + ", padding=" + std::to_string(padding_) + ")" +
         (fused_ == Activation::kRelu ? " + fused ReLU" : "");
}

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : kernel_(kernel), stride_(stride == 0 ? kernel : stride), padding_(padding) {
  require_positive("MaxPool2d", "kernel_size", kernel);
}

Variable MaxPool2d::forward(const Variable& x) { return autograd::max_pool2d(x, kernel_, stride_, padding_, fused_); }

std::string MaxPool2d::describe() const {
  return "MaxPool2d(kernel_size=" + std::to_string(kernel_) + ", stride=" + std::to_string(stride_) +
         ", padding=" + std::to_string(padding_) + ")" + (fused_ == Activation::kRelu ? " + fused ReLU" : "");
}

Variable ActivationLayer::forward(const Variable& x) { return autograd::activation(x, act_); }

std::string ActivationLayer::describe() const {
  switch (act_) {
    case Activation::kRelu: return "ReLU()";
    case Activation::kGelu: return "GELU()";
    case Activation::kTanh: return "Tanh()";
    case Activation::kNone: break;
  }
  return "Identity()";
}

Dropout::Dropout(float p) : p_(p) {
  if (!(p >= 0.0f && p < 1.0f))
    throw_error(ErrorKind::kConfig, "Dropout", "p must be in [0, 1), got " + std::to_string(p));
}

Variable Dropout::forward(const Variable& x) {
  if (!training() || p_ == 0.0f) return x;
  const ForwardContext& ctx = forward_context();
  // 2^16 dropout layers per step is far more than any model here has.
  return autograd::dropout(x, p_, ctx.seed, (ctx.step << 16) | (layer_key_ & 0xffff), ctx.first_sample);
}

std::string Dropout::describe() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

LayerNorm::LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
  require_positive("LayerNorm", "normalized_shape", dim);
  weight_ = &add_parameter("weight", {dim_}, {InitKind::kOnes, dim_, dim_});
  bias_ = &add_parameter("bias", {dim_}, {InitKind::kZeros, dim_, dim_});
}

Variable LayerNorm::forward(const Variable& x) { return autograd::layer_norm(x, weight_->var, bias_->var, eps_); }

std::string LayerNorm::describe() const { return "LayerNorm((" + std::to_string(dim_) + ",), eps=" + std::to_string(eps_) + ")"; }

Embedding::Embedding(int64_t rows, int64_t dim) : rows_(rows), dim_(dim) {
  require_positive("Embedding", "num_embeddings", rows);
  require_positive("Embedding", "embedding_dim", dim);
  weight_ = &add_parameter("weight", {rows_, dim_}, {InitKind::kNormal, rows_, dim_});
}

Variable Embedding::forward(const Variable& x) {
  const float* values = x.value().data();
  std::vector<int64_t> ids(static_cast<size_t>(x.value().numel()));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(values[i]);
  return lookup(ids);
}

Variable Embedding::lookup(const std::vector<int64_t>& ids) { return autograd::embedding(ids, weight_->var); }

std::string Embedding::describe() const { return "Embedding(" + std::to_string(rows_) + ", " + std::to_string(dim_) + ")"; }

ModuleList& ModuleList::add(std::unique_ptr<Module> module) {
  add_child(std::to_string(children().size()), std::move(module));
  return *this;
}

Variable ModuleList::forward(const Variable&) {
  throw_error(ErrorKind::kInternal, "ModuleList", "a container: its owner runs the children");
}

Variable ModuleDict::forward(const Variable&) {
  throw_error(ErrorKind::kInternal, "ModuleDict", "a container: its owner runs the children");
}

Variable Flatten::forward(const Variable& x) {
  if (channel_major_input_) return autograd::flatten_channel_major(x);
  const int64_t n = x.value().ndim() > 0 ? x.shape()[0] : 1;
  return autograd::reshape(x, {n, n ? x.value().numel() / n : 0});
}

Sequential& Sequential::add(std::unique_ptr<Module> layer) {
  add_child(std::to_string(children().size()), std::move(layer));
  skipped_.push_back(false);
  return *this;
}

Variable Sequential::forward(const Variable& x) {
  Variable h = x;
  for (size_t i = 0; i < children().size(); ++i)
    if (!skipped_[i]) h = children()[i].second->forward(h);
  return h;
}

void Sequential::fuse_activations() {
  for (size_t i = 0; i < children().size(); ++i) {
    auto* act = dynamic_cast<ActivationLayer*>(children()[i].second.get());
    if (act == nullptr || act->activation() != Activation::kRelu || skipped_[i]) continue;
    Module* next = i + 1 < children().size() ? children()[i + 1].second.get() : nullptr;
    Module* prev = i > 0 && !skipped_[i - 1] ? children()[i - 1].second.get() : nullptr;
    if (auto* pool = dynamic_cast<MaxPool2d*>(next); pool && pool->fused_activation() == Activation::kNone) {
      pool->fuse_activation(Activation::kRelu);
      skipped_[i] = true;
    } else if (auto* linear = dynamic_cast<Linear*>(prev); linear && linear->fused_activation() == Activation::kNone) {
      linear->fuse_activation(Activation::kRelu);
      skipped_[i] = true;
    } else if (auto* conv = dynamic_cast<Conv2d*>(prev); conv && conv->fused_activation() == Activation::kNone) {
      conv->fuse_activation(Activation::kRelu);
      skipped_[i] = true;
    }
  }
  plan_layouts();
}

void Sequential::plan_layouts() {
  auto plane_order_free = [](Module* m) {
    return dynamic_cast<MaxPool2d*>(m) != nullptr || dynamic_cast<ActivationLayer*>(m) != nullptr;
  };
  bool channel_major = false;  // layout of the activation flowing between children
  for (size_t i = 0; i < children().size(); ++i) {
    if (skipped_[i]) continue;
    Module* m = children()[i].second.get();
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      size_t j = i + 1;
      while (j < children().size() && (skipped_[j] || plane_order_free(children()[j].second.get()))) ++j;
      Module* consumer = j < children().size() ? children()[j].second.get() : nullptr;
      const bool out = dynamic_cast<Conv2d*>(consumer) != nullptr || dynamic_cast<Flatten*>(consumer) != nullptr;
      conv->set_layout(channel_major, out);
      channel_major = out;
    } else if (auto* flatten = dynamic_cast<Flatten*>(m)) {
      flatten->set_channel_major_input(channel_major);
      channel_major = false;
    } else if (!plane_order_free(m)) {
      channel_major = false;
    }
  }
}

}  // namespace gradmesh::nn
