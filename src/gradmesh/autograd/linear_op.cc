#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/storage.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/kernels/gemm_bf16.h"

namespace gradmesh::autograd {
namespace {

// Under bf16 products each of the three products would round its operands
// again; a Linear rounds its input and weight once in forward and keeps
// them (half the input's bytes) for backward, and the output gradient once
// for both backward products. Same bits as rounding per product.
// The copies come from the caching allocator (core/storage.h), as tensors
// do: fresh blocks of this size every step would page-fault every step.
class Bf16Copy {
 public:
  Bf16Copy() = default;
  Bf16Copy(const float* values, int64_t n) : storage_(std::make_unique<Storage>(static_cast<size_t>(n) * 2)) {
    kernels::round_to_bf16(values, n, static_cast<uint16_t*>(storage_->data()));
  }
  const uint16_t* data() const { return static_cast<const uint16_t*>(storage_->data()); }

 private:
  std::unique_ptr<Storage> storage_;
};

struct Bf16Operands {
  Bf16Copy x, w;
};

// One operand of a product: its float32 values, and its bf16 copy when the
// products are in bf16 (then the copy is what gets multiplied).
struct Operand {
  const float* f32;
  const Bf16Copy* bf16;
};

// C = op(A) op(B) + beta C through kernels::gemm, or gemm_rounded on the copies.
void product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Operand a, int64_t lda, Operand b,
             int64_t ldb, float beta, float* c, int64_t ldc) {
  if (a.bf16)
    kernels::gemm_rounded(trans_a, trans_b, m, n, k, 1.0f, a.bf16->data(), lda, b.bf16->data(), ldb, beta, c, ldc);
  else
    kernels::gemm(trans_a, trans_b, m, n, k, 1.0f, a.f32, lda, b.f32, ldb, beta, c, ldc);
}

}  // namespace

Variable linear(const Variable& x, const Variable& weight, const Variable& bias, Activation act) {
  const Shape& ws = weight.shape();
  if (x.value().ndim() != 2 || ws.size() != 2 || x.shape()[1] != ws[1] ||
      (bias.defined() && (bias.value().ndim() != 1 || bias.shape()[0] != ws[0])))
    throw_error(ErrorKind::kShape, "linear",
                "input " + shape_str(x.shape()) + ", weight " + shape_str(ws) +
                    (bias.defined() ? ", bias " + shape_str(bias.shape()) : "") +
                    " (expected input [B, in], weight [out, in], bias [out])");
  if (act != Activation::kNone && act != Activation::kRelu)
    throw_error(ErrorKind::kInternal, "linear", "only ReLU is fused");
  const int64_t batch = x.shape()[0], in = ws[1], out = ws[0];
  Tensor y = Tensor::empty({batch, out});
  std::shared_ptr<Bf16Operands> bf16;
  if (kernels::matmul_precision() == kernels::MatmulPrecision::kBf16)
    bf16 = std::make_shared<Bf16Operands>(
        Bf16Operands{Bf16Copy(x.value().data(), batch * in), Bf16Copy(weight.value().data(), out * in)});
  product(false, true, batch, out, in, {x.value().data(), bf16 ? &bf16->x : nullptr}, in,
          {weight.value().data(), bf16 ? &bf16->w : nullptr}, in, 0.0f, y.data(), out);
  if (bias.defined() || act != Activation::kNone)
    kernels::bias_rows_forward(y.data(), bias.defined() ? bias.value().data() : nullptr, batch, out, act);
  Variable result(std::move(y));
  if (!should_record({&x, &weight, &bias})) return result;
  if (bf16 && !weight.requires_grad()) bf16->x = {};  // only dW multiplies the input again

  auto xs = x.state(), wst = weight.state(), bs = bias.state(), ys = result.state();
  std::vector<std::shared_ptr<VariableState>> inputs{xs, wst};
  if (bs) inputs.push_back(bs);
  current_tape().record(std::move(inputs), ys, [=] {
    float* dy = ys->grad.data();  // [batch, out]; dead after this op, so the ReLU mask is applied in place
    if (act == Activation::kRelu) kernels::relu_mask_inplace(dy, ys->value.data(), batch * out);
    const Bf16Copy dy16 = bf16 && (wst->requires_grad || xs->requires_grad) ? Bf16Copy(dy, batch * out) : Bf16Copy();
    const Operand grad{dy, bf16 ? &dy16 : nullptr};
    if (wst->requires_grad) {  // dW [out, in] = dY^T X
      GradTarget t = grad_target(*wst);
      product(true, false, out, in, batch, grad, out, {xs->value.data(), bf16 ? &bf16->x : nullptr}, in,
              t.accumulate ? 1.0f : 0.0f, t.data, in);
    }
    if (bs && bs->requires_grad) {
      GradTarget t = grad_target(*bs);
      kernels::column_sums(dy, batch, out, t.data, t.accumulate);
    }
    if (xs->requires_grad) {  // dX [batch, in] = dY W
      GradTarget t = grad_target(*xs);
      product(false, false, batch, in, out, grad, out, {wst->value.data(), bf16 ? &bf16->w : nullptr}, in,
              t.accumulate ? 1.0f : 0.0f, t.data, in);
    }
  });
  return result;
}

}  // namespace gradmesh::autograd
