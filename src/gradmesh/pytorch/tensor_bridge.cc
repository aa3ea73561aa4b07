#include "gradmesh/pytorch/tensor_bridge.h"

#include <cstring>

namespace gradmesh::pytorch {

std::optional<DType> native_dtype(at::ScalarType type) {
  if (type == at::kFloat) return DType::kF32;
  if (type == at::kBFloat16) return DType::kBF16;
  return std::nullopt;
}

void Staged::copy_back() const {
  if (!copied) return;
  RawWrites raw;
  if (!as_bytes) {
    user.copy_(buffer.view(user.sizes()));
    return;
  }
  // A byte buffer: its first nbytes bytes are the tensor's contents.
  if (user.is_contiguous()) {
    std::memcpy(user.data_ptr(), buffer.data_ptr(), user.nbytes());
    return;
  }
  at::Tensor contiguous = at::empty(user.sizes(), user.options().memory_format(at::MemoryFormat::Contiguous));
  std::memcpy(contiguous.data_ptr(), buffer.data_ptr(), contiguous.nbytes());
  user.copy_(contiguous);
}

Staged stage_native(const at::Tensor& user, bool copy_in, bool fresh) {
  if (user.is_contiguous() && !fresh) return {user, user, false, false};
  RawWrites raw;
  at::Tensor buffer = at::empty(user.sizes(), user.options().memory_format(at::MemoryFormat::Contiguous));
  if (copy_in) buffer.copy_(user);
  return {user, buffer, true, false};
}

Staged stage_bytes(const at::Tensor& user, bool copy_in) {
  const size_t bytes = user.numel() * user.element_size();
  if (user.is_contiguous() && bytes % 2 == 0) return {user, user, false, true};
  at::Tensor buffer = at::empty({static_cast<int64_t>(bytes + bytes % 2)}, user.options().dtype(at::kByte));
  if (copy_in) {
    at::Tensor contiguous = user.contiguous();
    std::memcpy(buffer.data_ptr(), contiguous.data_ptr(), bytes);
  }
  if (bytes % 2 != 0) static_cast<uint8_t*>(buffer.data_ptr())[bytes] = 0;
  return {user, buffer, true, true};
}

Tensor lend_native(const Staged& staged) {
  const std::optional<DType> dtype = native_dtype(staged.buffer.scalar_type());
  TORCH_INTERNAL_ASSERT(dtype.has_value(), "lend_native of a dtype gradmesh does not reduce");
  return Tensor::borrow(staged.buffer.data_ptr(), {staged.buffer.numel()}, *dtype);
}

Tensor lend_bytes(const Staged& staged) {
  const int64_t bytes = staged.buffer.numel() * staged.buffer.element_size();
  TORCH_INTERNAL_ASSERT(bytes % 2 == 0, "lend_bytes of an odd byte count");
  return Tensor::borrow(staged.buffer.data_ptr(), {bytes / 2}, DType::kBF16);
}

std::string dtype_label(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

std::string reduce_op_label(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "sum";
    case c10d::ReduceOp::AVG: return "avg";
    case c10d::ReduceOp::PRODUCT: return "product";
    case c10d::ReduceOp::MIN: return "min";
    case c10d::ReduceOp::MAX: return "max";
    case c10d::ReduceOp::BAND: return "band";
    case c10d::ReduceOp::BOR: return "bor";
    case c10d::ReduceOp::BXOR: return "bxor";
    case c10d::ReduceOp::PREMUL_SUM: return "premul_sum";
    default: return "unknown";
  }
}

namespace {

at::Tensor fold(const at::Tensor& gathered, at::Tensor (*combine)(const at::Tensor&, const at::Tensor&)) {
  at::Tensor result = gathered[0].clone();
  for (int64_t r = 1; r < gathered.size(0); ++r) result = combine(result, gathered[r]);
  return result;
}

}  // namespace

at::Tensor reduce_gathered(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op) {
  const at::ScalarType type = gathered.scalar_type();
  const bool integral = at::isIntegralType(type, /*includeBool=*/true);
  switch (op) {
    case c10d::ReduceOp::SUM: return at::sum(gathered, {0}, false, type);
    case c10d::ReduceOp::PRODUCT:
      // ATen has no bfloat16 or half product: form it in float32, round once.
      if (type == at::kBFloat16 || type == at::kHalf) return at::prod(gathered.to(at::kFloat), 0).to(type);
      return at::prod(gathered, 0, false, type);
    case c10d::ReduceOp::MIN: return at::amin(gathered, {0});
    case c10d::ReduceOp::MAX: return at::amax(gathered, {0});
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!integral, "gradmesh: avg of ", dtype_label(type),
                  " tensors is not defined (the mean of integers is not an integer); reduce with sum and divide");
      return at::sum(gathered, {0}, false, type).div_(gathered.size(0));
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR: {
      TORCH_CHECK(integral, "gradmesh: ", reduce_op_label(op), " needs integer or bool tensors, not ",
                  dtype_label(type));
      if (op == c10d::ReduceOp::BAND)
        return fold(gathered, [](const at::Tensor& a, const at::Tensor& b) { return at::bitwise_and(a, b); });
      if (op == c10d::ReduceOp::BOR)
        return fold(gathered, [](const at::Tensor& a, const at::Tensor& b) { return at::bitwise_or(a, b); });
      return fold(gathered, [](const at::Tensor& a, const at::Tensor& b) { return at::bitwise_xor(a, b); });
    }
    default:
      TORCH_CHECK(false, "gradmesh: reduce op ", reduce_op_label(op), " is not supported (premul_sum is NCCL's)");
  }
}

void check_cpu_dense(const at::Tensor& t, const char* operation) {
  TORCH_CHECK(t.defined(), "gradmesh: ", operation, " got an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "gradmesh: ", operation, " takes CPU tensors; got one on ", t.device().str());
  TORCH_CHECK(t.layout() == at::kStrided, "gradmesh: ", operation, " takes dense tensors, not ", t.layout());
}

}  // namespace gradmesh::pytorch
