// qkv::Tensor: numbers only. A shape and a shared, contiguous, row-major block
// of `real`s. No gradient, no history: that is the autograd layer's job.
//
// Handle semantics: copying a Tensor shares its storage (like a PyTorch tensor
// or a shared_ptr). reshape/view share storage too; transpose/permute (in
// core/layout.h) return a new contiguous copy, so every kernel can assume a
// contiguous row-major layout.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <vector>

#include "core/generator.h"
#include "core/pool.h"
#include "core/real.h"
#include "core/shape.h"

namespace qkv {

// A block of `n` reals from the caching allocator.
class Storage {
 public:
  explicit Storage(int64_t n);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  real* data() { return ptr_; }
  int64_t size() const { return n_; }

 private:
  real* ptr_;
  int64_t n_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage; defined() is false

  // Creation. Shapes are checked (no negative dims; a Shape never exceeds kMaxRank).
  static Tensor empty(const Shape& shape);  // uninitialized
  static Tensor zeros(const Shape& shape);
  static Tensor ones(const Shape& shape);
  static Tensor full(const Shape& shape, real value);
  static Tensor scalar(real value);  // rank 0
  static Tensor arange(real end);
  static Tensor arange(real start, real end, real step = 1);
  static Tensor from_vector(const std::vector<real>& values, const Shape& shape);
  static Tensor from_vector(const std::vector<real>& values);  // 1-D
  static Tensor uniform(const Shape& shape, real lo, real hi, Generator& g = default_generator());
  static Tensor normal(const Shape& shape, real mean, real stddev,
                       Generator& g = default_generator());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int axis) const;  // negative axes count from the end
  int64_t numel() const { return numel_; }

  real* data() { return storage_ ? storage_->data() + offset_ : nullptr; }
  const real* data() const { return storage_ ? storage_->data() + offset_ : nullptr; }

  // Same numbers, new shape; shares storage. One dimension may be -1.
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const { return reshape(shape); }
  // Rows [begin, end) along axis 0; shares storage (still contiguous).
  Tensor slice0(int64_t begin, int64_t end) const;
  Tensor clone() const;  // deep copy

  real item() const;  // the single value of a one-element tensor
  real at(std::initializer_list<int64_t> index) const;
  real& at(std::initializer_list<int64_t> index);
  std::vector<real> to_vector() const;

  // In place.
  Tensor& fill_(real value);
  Tensor& zero_() { return fill_(0); }
  Tensor& copy_(const Tensor& src);                   // same number of elements
  Tensor& add_(const Tensor& other, real alpha = 1);  // this += alpha * other, same shape
  Tensor& mul_(real s);

  bool shares_storage_with(const Tensor& other) const {
    return storage_ && storage_ == other.storage_;
  }
  long storage_use_count() const { return storage_.use_count(); }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  Shape shape_;
};

// A list of tensors, e.g. the gradients a backward returns. Its buffer comes
// from the pool (core/pool.h), so making one every step costs no heap block.
using TensorList = PoolVector<Tensor>;

// PyTorch-like printing: values, then the shape; big tensors are truncated.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Throws `op: tensor is undefined` when t has no storage.
void check_defined(const Tensor& t, const char* op);

}  // namespace qkv
