// Tensor: a shape, a dtype and a view into 64-byte aligned storage.
//
// Tensors are always contiguous (row-major); a view shares storage with the
// tensor it came from, so parameters can live inside one flat buffer that the
// optimizer and the gradient all-reduce see as a single array. Storage comes
// from a caching allocator (storage.h), so a training step that allocates the
// same shapes every iteration stops touching malloc after the first step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace gradmesh {

enum class DType : uint8_t { kF32, kBF16 };

size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "BF16".
const char* dtype_name(DType dtype);

using Shape = std::vector<int64_t>;
// Element count and byte size of a shape. A negative dimension, or a product
// that does not fit int64, is Error(kShape) naming the shape.
int64_t shape_numel(const Shape& shape);
int64_t shape_nbytes(const Shape& shape, DType dtype);
std::string shape_str(const Shape& shape);  // "[128, 784]"

class Storage;

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contents: every caller writes before it reads.
  static Tensor empty(const Shape& shape, DType dtype = DType::kF32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kF32);
  static Tensor full(const Shape& shape, float value);
  // A tensor over `data`, which another owner keeps alive and in place for
  // as long as this tensor or a view of it lives (no copy; no alignment
  // required). For handing a PyTorch tensor's memory to a collective.
  static Tensor borrow(void* data, const Shape& shape, DType dtype);
  // Copies `values` (size must equal the shape's element count).
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  // Cannot overflow: every tensor's storage was sized by shape_nbytes(), which checks.
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  // REQUIRES: dtype() == kF32.
  float* data();
  const float* data() const;
  void* raw();
  const void* raw() const;

  // A view with the same storage and a new shape of equal element count.
  Tensor view(const Shape& shape) const;
  // A view of `shape` starting `element_offset` elements into this tensor.
  Tensor slice_flat(int64_t element_offset, const Shape& shape) const;
  // A deep copy into fresh storage.
  Tensor clone() const;
  // Copy of the contents as float32 (converts bf16).
  std::vector<float> to_vector() const;
  // Same dtype/elements into fresh storage in `dtype` (f32 <-> bf16).
  Tensor to(DType dtype) const;

  void fill(float value);
  void zero();
  // Copies `src` (same numel and dtype) into this tensor's storage.
  void copy_from(const Tensor& src);

  float item() const;  // REQUIRES: numel() == 1, kF32

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace gradmesh
