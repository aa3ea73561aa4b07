// oneDNN behind kernels::Bf16Conv (conv_bf16.h).
//
// One set of primitives per geometry, layout and thread count (oneDNN plans
// its split over the threads there are when a primitive is made), kept in a
// bounded map: the forward, both backward passes, and the reorders between
// gradmesh's float32 layouts and the blocked layouts oneDNN chose (format
// "any"). A reorder is made only where the two layouts differ; the ones
// into gradmesh's gradients come twice, overwriting and accumulating (a
// sum post-op), because a gradient may already hold another consumer's part.
#include "gradmesh/kernels/conv_bf16.h"

#include <map>
#include <optional>
#include <tuple>

#include "gradmesh/core/storage.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/onednn_runtime.h"

namespace gradmesh::kernels {

// Named, not anonymous: Bf16Conv::Impl holds these, and the library's unity
// build puts this file beside gemm_bf16.cc.
namespace conv_bf16_internal {

using Tag = dnnl::memory::format_tag;
using DataType = dnnl::memory::data_type;
using Desc = dnnl::memory::desc;

// A layout change (and, f32 -> bf16, the rounding); absent where the layouts match.
struct Reorder {
  std::optional<dnnl::reorder::primitive_desc> pd;
  dnnl::reorder primitive;

  Reorder(const Desc& from, const Desc& to, bool accumulate = false) {
    if (from == to && !accumulate) return;
    dnnl::primitive_attr attr = onednn::user_scratchpad_attr();
    if (accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    pd.emplace(onednn::cpu_engine(), from, onednn::cpu_engine(), to, attr);
    primitive = dnnl::reorder(*pd);
  }
  // Runs it, or returns false when the layouts match and `from` can be used as it is.
  bool run(const dnnl::memory& from, const dnnl::memory& to) const {
    if (!pd) return false;
    onednn::execute(primitive, *pd, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return true;
  }
};

struct Primitives {
  Desc x_user, y_user, w_user, bias;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_backward_weights weights;
  Reorder x_in, w_in, y_out;                                  // forward
  Reorder dy_for_data, dy_for_weights, w_for_data, x_for_weights;  // backward operands
  Reorder dx_out, dx_add, dw_out, dw_add;                          // gradients back
};

using ConvKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool,
                       bool, int, int>;
constexpr size_t kMaxConvPrimitives = 64;

std::shared_ptr<const Primitives> make_primitives(const ConvGeometry& g, bool has_bias, Activation act,
                                                  bool cm_out) {
  const dnnl::memory::dims x_dims{g.batch, g.in_channels, g.height, g.width};
  const dnnl::memory::dims w_dims{g.out_channels, g.in_channels, g.kernel_h, g.kernel_w};
  const dnnl::memory::dims y_dims{g.batch, g.out_channels, g.out_h(), g.out_w()};
  const dnnl::memory::dims strides{g.stride, g.stride}, pad{g.padding, g.padding};
  // Channel-major [C, N, H, W] is dims (N, C, H, W) stored in the order b, a, c, d.
  const Desc x_user(x_dims, DataType::f32, g.channel_major_input ? Tag::bacd : Tag::abcd);
  const Desc y_user(y_dims, DataType::f32, cm_out ? Tag::bacd : Tag::abcd);
  const Desc w_user(w_dims, DataType::f32, Tag::abcd);
  const Desc bias = has_bias ? Desc({g.out_channels}, DataType::f32, Tag::a) : Desc();
  const Desc x_any(x_dims, DataType::bf16, Tag::any), w_any(w_dims, DataType::bf16, Tag::any);
  const Desc dy_any(y_dims, DataType::bf16, Tag::any), y_any(y_dims, DataType::f32, Tag::any);
  const Desc dx_any(x_dims, DataType::f32, Tag::any), dw_any(w_dims, DataType::f32, Tag::any);
  const auto direct = dnnl::algorithm::convolution_direct;

  dnnl::primitive_attr fwd_attr = onednn::user_scratchpad_attr();
  if (act == Activation::kRelu) {
    dnnl::post_ops relu;
    relu.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    fwd_attr.set_post_ops(relu);
  }
  const dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training, direct, x_any, w_any, bias, y_any,
                                                 strides, pad, pad);
  const dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, fwd_attr, onednn::cpu_engine());
  const dnnl::convolution_backward_data::primitive_desc data_pd(
      dnnl::convolution_backward_data::desc(direct, dx_any, w_any, dy_any, strides, pad, pad),
      onednn::user_scratchpad_attr(), onednn::cpu_engine(), fwd_pd);
  const dnnl::convolution_backward_weights::primitive_desc weights_pd(
      dnnl::convolution_backward_weights::desc(direct, x_any, dw_any, bias, dy_any, strides, pad, pad),
      onednn::user_scratchpad_attr(), onednn::cpu_engine(), fwd_pd);

  const Desc x16 = fwd_pd.src_desc(), w16 = fwd_pd.weights_desc();
  return std::make_shared<const Primitives>(Primitives{
      x_user, y_user, w_user, bias, fwd_pd, dnnl::convolution_forward(fwd_pd), data_pd,
      dnnl::convolution_backward_data(data_pd), weights_pd, dnnl::convolution_backward_weights(weights_pd),
      Reorder(x_user, x16), Reorder(w_user, w16), Reorder(fwd_pd.dst_desc(), y_user),
      Reorder(y_user, data_pd.diff_dst_desc()),
      Reorder(y_user, weights_pd.diff_dst_desc()), Reorder(w16, data_pd.weights_desc()),
      Reorder(x16, weights_pd.src_desc()), Reorder(data_pd.diff_src_desc(), x_user),
      Reorder(data_pd.diff_src_desc(), x_user, true), Reorder(weights_pd.diff_weights_desc(), w_user),
      Reorder(weights_pd.diff_weights_desc(), w_user, true)});
}

std::shared_ptr<const Primitives> primitives_for(const ConvGeometry& g, bool has_bias, Activation act, bool cm_out) {
  static std::map<ConvKey, std::shared_ptr<const Primitives>> made;
  const ConvKey key{g.batch, g.in_channels, g.height, g.width, g.out_channels, g.kernel_h, g.kernel_w, g.stride,
                g.padding, g.channel_major_input, cm_out, has_bias, static_cast<int>(act), num_threads()};
  std::lock_guard<std::mutex> lock(onednn::creation_mutex());
  const auto found = made.find(key);
  if (found != made.end()) return found->second;
  auto primitives = make_primitives(g, has_bias, act, cm_out);
  if (made.size() >= kMaxConvPrimitives) made.clear();
  made.emplace(key, primitives);
  return primitives;
}

// oneDNN memory over a block from gradmesh's caching allocator (Storage):
// the blocked copies are the size of activations, made every step.
struct Buffer {
  std::unique_ptr<Storage> storage;
  dnnl::memory memory;

  Buffer() = default;
  explicit Buffer(const Desc& desc)
      : storage(std::make_unique<Storage>(desc.get_size())),
        memory(desc, onednn::cpu_engine(), storage->data()) {}
};

// oneDNN memory over the caller's float32 data; oneDNN takes non-const
// pointers, and only reads the sources.
dnnl::memory user_memory(const Desc& desc, const float* data) {
  return dnnl::memory(desc, onednn::cpu_engine(), const_cast<float*>(data));
}

// `from` in layout `reorder`'s destination: reordered into `scratch`, or
// `from` itself when the layouts match.
dnnl::memory converted(const Reorder& reorder, const dnnl::memory& from, const Desc& to, Buffer& scratch) {
  if (!reorder.pd) return from;
  scratch = Buffer(to);
  reorder.run(from, scratch.memory);
  return scratch.memory;
}

}  // namespace conv_bf16_internal

namespace conv16 = conv_bf16_internal;

struct Bf16Conv::Impl {
  std::shared_ptr<const conv16::Primitives> p;
  conv16::Buffer x16, w16;  // the forward's rounded operands, kept for backward
};

Bf16Conv::Bf16Conv(const ConvGeometry& g, bool has_bias, Activation act, bool channel_major_output)
    : impl_(std::make_unique<Impl>()) {
  impl_->p = conv16::primitives_for(g, has_bias, act, channel_major_output);
}

Bf16Conv::~Bf16Conv() = default;

void Bf16Conv::forward(const float* x, const float* w, const float* bias, float* y) {
  const conv16::Primitives& p = *impl_->p;
  impl_->x16 = conv16::Buffer(p.fwd_pd.src_desc());
  impl_->w16 = conv16::Buffer(p.fwd_pd.weights_desc());
  p.x_in.run(conv16::user_memory(p.x_user, x), impl_->x16.memory);
  p.w_in.run(conv16::user_memory(p.w_user, w), impl_->w16.memory);
  const dnnl::memory y_user = conv16::user_memory(p.y_user, y);
  conv16::Buffer y_blocked;
  const dnnl::memory dst = p.y_out.pd ? (y_blocked = conv16::Buffer(p.fwd_pd.dst_desc())).memory : y_user;
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, impl_->x16.memory}, {DNNL_ARG_WEIGHTS, impl_->w16.memory}, {DNNL_ARG_DST, dst}};
  if (bias != nullptr) args.insert({DNNL_ARG_BIAS, conv16::user_memory(p.bias, bias)});
  onednn::execute(p.fwd, p.fwd_pd, std::move(args));
  p.y_out.run(dst, y_user);
}

void Bf16Conv::backward(const float* dy, const Grads& grads) {
  const conv16::Primitives& p = *impl_->p;
  const dnnl::memory dy_user = conv16::user_memory(p.y_user, dy);
  conv16::Buffer dy16;  // dy rounded, for the weights' pass and, where the layouts agree, the input's
  std::optional<dnnl::memory> dy_w;
  if (grads.dw != nullptr || grads.db != nullptr) {
    dy_w = conv16::converted(p.dy_for_weights, dy_user, p.weights_pd.diff_dst_desc(), dy16);
    weight_grads(*dy_w, grads);
  }
  if (grads.dx == nullptr) return;
  conv16::Buffer dy16_data, w16, dx_blocked;
  const dnnl::memory dy_d = dy_w && p.data_pd.diff_dst_desc() == p.weights_pd.diff_dst_desc()
                                ? *dy_w
                                : conv16::converted(p.dy_for_data, dy_user, p.data_pd.diff_dst_desc(), dy16_data);
  const dnnl::memory w = conv16::converted(p.w_for_data, impl_->w16.memory, p.data_pd.weights_desc(), w16);
  const bool direct = p.data_pd.diff_src_desc() == p.x_user && !grads.dx_accumulate;
  const dnnl::memory dx =
      direct ? conv16::user_memory(p.x_user, grads.dx) : (dx_blocked = conv16::Buffer(p.data_pd.diff_src_desc())).memory;
  onednn::execute(p.data, p.data_pd, {{DNNL_ARG_DIFF_DST, dy_d}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, dx}});
  if (!direct) (grads.dx_accumulate ? p.dx_add : p.dx_out).run(dx, conv16::user_memory(p.x_user, grads.dx));
}

void Bf16Conv::weight_grads(const dnnl::memory& dy16, const Grads& grads) {
  const conv16::Primitives& p = *impl_->p;
  conv16::Buffer x16, dw_blocked, db_scratch;
  const dnnl::memory src = conv16::converted(p.x_for_weights, impl_->x16.memory, p.weights_pd.src_desc(), x16);
  const conv16::Desc dw_desc = p.weights_pd.diff_weights_desc();
  const bool direct = grads.dw != nullptr && dw_desc == p.w_user && !grads.dw_accumulate;
  const dnnl::memory dw = direct ? conv16::user_memory(p.w_user, grads.dw) : (dw_blocked = conv16::Buffer(dw_desc)).memory;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dy16}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
  const bool has_bias = !p.bias.is_zero();
  const bool db_direct = grads.db != nullptr && !grads.db_accumulate;
  if (has_bias)
    args.insert({DNNL_ARG_DIFF_BIAS, db_direct ? conv16::user_memory(p.bias, grads.db) : (db_scratch = conv16::Buffer(p.bias)).memory});
  onednn::execute(p.weights, p.weights_pd, std::move(args));
  if (grads.dw != nullptr && !direct)
    (grads.dw_accumulate ? p.dw_add : p.dw_out).run(dw, conv16::user_memory(p.w_user, grads.dw));
  if (has_bias && grads.db != nullptr && grads.db_accumulate) {
    const auto* part = static_cast<const float*>(db_scratch.storage->data());
    for (int64_t o = 0; o < p.bias.dims()[0]; ++o) grads.db[o] += part[o];
  }
}

}  // namespace gradmesh::kernels
