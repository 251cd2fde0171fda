// Elementwise kernels on Tensors. Binary ops broadcast like NumPy. Each unary
// op that autograd differentiates has its derivative kernel here too, so the
// forward and backward passes share one implementation of the maths.
#pragma once
#include "core/fast_math.h"
#include "core/tensor.h"

namespace qkv {

// Binary, with broadcasting: out shape = broadcast(a.shape, b.shape).
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// Scalar forms.
Tensor add(const Tensor& a, real s);
Tensor sub(const Tensor& a, real s);
Tensor rsub(real s, const Tensor& a);  // s - a
Tensor mul(const Tensor& a, real s);
Tensor div(const Tensor& a, real s);
Tensor rdiv(real s, const Tensor& a);  // s / a

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, real s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, real s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, real s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, real s) { return div(a, s); }
inline Tensor operator+(real s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(real s, const Tensor& a) { return rsub(s, a); }
inline Tensor operator*(real s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(real s, const Tensor& a) { return rdiv(s, a); }

// Unary.
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor pow(const Tensor& a, real p);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a);  // exact: x * Phi(x), Phi the normal CDF (PyTorch's default)
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
inline Tensor operator-(const Tensor& a) { return neg(a); }

// Derivative kernels: given the upstream gradient g and the op's input x (or
// output y), return g * f'(.). Same shapes throughout.
Tensor relu_backward(const Tensor& g, const Tensor& x);         // g * (x > 0)
Tensor gelu_backward(const Tensor& g, const Tensor& x);         // g * (Phi(x) + x phi(x))
Tensor tanh_backward(const Tensor& g, const Tensor& y);         // g * (1 - y^2)
Tensor sigmoid_backward(const Tensor& g, const Tensor& y);      // g * y (1 - y)
Tensor pow_backward(const Tensor& g, const Tensor& x, real p);  // g * p x^(p-1)

// Scalar GELU and its derivative (gelu_scalar, gelu_grad_scalar) for fused
// layers that apply it in their own loops live in core/fast_math.h.

// Reduces a broadcast gradient back to `shape` by summing over the broadcast
// dimensions: the backward of broadcasting.
Tensor sum_to(const Tensor& g, const Shape& shape);

// Largest |a - b| over all elements (shapes must match); for tests and tools.
double max_abs_diff(const Tensor& a, const Tensor& b);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace qkv
