#include "gradmesh/core/tensor.h"

#include <algorithm>
#include <cstring>

#include "gradmesh/core/bf16.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/storage.h"

namespace gradmesh {

size_t dtype_size(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

const char* dtype_name(DType dtype) { return dtype == DType::kF32 ? "F32" : "BF16"; }

int64_t shape_numel(const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0) throw_error(ErrorKind::kShape, "shape " + shape_str(shape), "negative dimension " + std::to_string(d));
  // A zero dimension makes any shape empty, however large the others are.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      throw_error(ErrorKind::kShape, "shape " + shape_str(shape),
                  "holds more elements than a 64-bit count (2^63 - 1); a dimension is far too large");
  return n;
}

int64_t shape_nbytes(const Shape& shape, DType dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes))
    throw_error(ErrorKind::kShape, "shape " + shape_str(shape),
                std::string("needs more bytes of ") + dtype_name(dtype) + " than a 64-bit size holds");
  return bytes;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  const int64_t bytes = shape_nbytes(shape, dtype);
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, static_cast<size_t>(bytes), Storage::Borrowed{});
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  const int64_t bytes = shape_nbytes(shape, dtype);  // checked here, so nbytes() never overflows
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(bytes));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty(shape);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw_error(ErrorKind::kShape, "Tensor::from_vector",
                std::to_string(values.size()) + " values for shape " + shape_str(shape));
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  if (j < 0 || j >= n)
    throw_error(ErrorKind::kShape, "Tensor::dim", "dimension " + std::to_string(i) + " of " + shape_str(shape_));
  return shape_[j];
}

float* Tensor::data() { return const_cast<float*>(static_cast<const Tensor*>(this)->data()); }

const float* Tensor::data() const {
  GRADMESH_CHECK(dtype_ == DType::kF32, "float access to a bf16 tensor");
  return static_cast<const float*>(raw());
}

void* Tensor::raw() { return const_cast<void*>(static_cast<const Tensor*>(this)->raw()); }

const void* Tensor::raw() const {
  GRADMESH_CHECK(storage_ != nullptr, "access to an undefined tensor");
  return static_cast<const char*>(storage_->data()) + offset_bytes_;
}

Tensor Tensor::view(const Shape& shape) const {
  if (shape_numel(shape) != numel_)
    throw_error(ErrorKind::kShape, "Tensor::view", "cannot view " + shape_str(shape_) + " as " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_flat(int64_t element_offset, const Shape& shape) const {
  const int64_t n = shape_numel(shape);
  int64_t end = 0;
  if (element_offset < 0 || __builtin_add_overflow(element_offset, n, &end) || end > numel_)
    throw_error(ErrorKind::kShape, "Tensor::slice_flat",
                std::to_string(n) + " elements at offset " + std::to_string(element_offset) +
                    " run outside a tensor of " + std::to_string(numel_));
  Tensor t = *this;
  t.offset_bytes_ += static_cast<size_t>(element_offset) * dtype_size(dtype_);
  t.shape_ = shape;
  t.numel_ = n;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  if (numel_ > 0) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

std::vector<float> Tensor::to_vector() const {
  if (dtype_ == DType::kF32) return std::vector<float>(data(), data() + numel_);
  std::vector<float> out(static_cast<size_t>(numel_));
  const auto* src = static_cast<const uint16_t*>(raw());
  for (int64_t i = 0; i < numel_; ++i) out[i] = bf16_to_float(src[i]);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  Tensor t = empty(shape_, dtype);
  if (dtype == DType::kBF16) {
    auto* dst = static_cast<uint16_t*>(t.raw());
    const float* src = data();
    for (int64_t i = 0; i < numel_; ++i) dst[i] = float_to_bf16(src[i]);
  } else {
    const auto* src = static_cast<const uint16_t*>(raw());
    float* dst = t.data();
    for (int64_t i = 0; i < numel_; ++i) dst[i] = bf16_to_float(src[i]);
  }
  return t;
}

void Tensor::fill(float value) {
  if (dtype_ == DType::kF32) {
    std::fill(data(), data() + numel_, value);
  } else {
    std::fill(static_cast<uint16_t*>(raw()), static_cast<uint16_t*>(raw()) + numel_, float_to_bf16(value));
  }
}

void Tensor::zero() {
  if (numel_ > 0) std::memset(raw(), 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel_ != numel_ || src.dtype_ != dtype_)
    throw_error(ErrorKind::kShape, "Tensor::copy_from",
                "source " + shape_str(src.shape_) + " " + dtype_name(src.dtype_) + " into " + shape_str(shape_) +
                    " " + dtype_name(dtype_));
  if (numel_ > 0) std::memmove(raw(), src.raw(), nbytes());
}

float Tensor::item() const {
  if (numel_ != 1) throw_error(ErrorKind::kShape, "Tensor::item", "tensor of shape " + shape_str(shape_));
  return data()[0];
}

}  // namespace gradmesh
