#include "gradmesh/autograd/attention.h"

#include <string>

#include "gradmesh/autograd/tape.h"
#include "gradmesh/core/error.h"
#include "gradmesh/kernels/attention.h"

namespace gradmesh::autograd {

Variable causal_self_attention(const Variable& qkv, int64_t n_head) {
  const bool three_d = qkv.value().ndim() == 3;
  const int64_t width = three_d ? qkv.shape()[2] : 0;
  if (n_head < 1 || !three_d || width == 0 || width % (3 * n_head) != 0)
    throw_error(ErrorKind::kShape, "causal_self_attention",
                "qkv " + shape_str(qkv.shape()) + " with n_head " + std::to_string(n_head) +
                    " (expected n_head >= 1 and qkv [B, T, 3 * C] with C a positive multiple of n_head)");
  const kernels::AttentionShape s{qkv.shape()[0], qkv.shape()[1], n_head, width / (3 * n_head)};
  const int64_t C = s.heads * s.head_dim;
  Tensor y = Tensor::empty({s.batch, s.seq, C});
  Tensor lse = Tensor::empty({s.batch, s.heads, s.seq});
  kernels::causal_attention_forward(qkv.value().data(), s, y.data(), lse.data());
  Variable result(std::move(y));
  if (!should_record({&qkv})) return result;
  auto xs = qkv.state(), ys = result.state();
  current_tape().record({xs}, ys, [=] {
    GradTarget t = grad_target(*xs);
    kernels::causal_attention_backward(xs->value.data(), ys->value.data(), lse.data(), ys->grad.data(), s, t.data,
                                       t.accumulate);
  });
  return result;
}

}  // namespace gradmesh::autograd
