// Differentiable primitive ops on Vars. Each is implemented in an ops_*.cpp
// file as a Node with its forward and backward side by side. Shapes follow
// the core kernels (NumPy broadcasting for binary ops). The list mirrors
// core/elementwise.h on purpose: one differentiable op per kernel.
#pragma once
#include <vector>

#include "autograd/var.h"

namespace qkv {

// ---- elementwise (ops_elementwise.cpp) ----
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
Var add(const Var& a, real s);
Var mul(const Var& a, real s);
Var rsub(real s, const Var& a);  // s - a
Var rdiv(real s, const Var& a);  // s / a
Var neg(const Var& a);
Var exp(const Var& a);
Var log(const Var& a);
Var sqrt(const Var& a);
Var pow(const Var& a, real p);
Var relu(const Var& a);
Var gelu(const Var& a);
Var tanh(const Var& a);
Var sigmoid(const Var& a);

inline Var operator+(const Var& a, const Var& b) { return add(a, b); }
inline Var operator-(const Var& a, const Var& b) { return sub(a, b); }
inline Var operator*(const Var& a, const Var& b) { return mul(a, b); }
inline Var operator/(const Var& a, const Var& b) { return div(a, b); }
inline Var operator+(const Var& a, real s) { return add(a, s); }
inline Var operator-(const Var& a, real s) { return add(a, -s); }
inline Var operator*(const Var& a, real s) { return mul(a, s); }
inline Var operator/(const Var& a, real s) { return mul(a, real(1) / s); }
inline Var operator+(real s, const Var& a) { return add(a, s); }
inline Var operator-(real s, const Var& a) { return rsub(s, a); }
inline Var operator*(real s, const Var& a) { return mul(a, s); }
inline Var operator/(real s, const Var& a) { return rdiv(s, a); }
inline Var operator-(const Var& a) { return neg(a); }

// ---- reductions (ops_reduce.cpp) ----
Var sum(const Var& a);  // all elements -> scalar
Var sum(const Var& a, int axis, bool keepdim = false);
Var mean(const Var& a);
Var mean(const Var& a, int axis, bool keepdim = false);
Var max(const Var& a);  // gradient goes to the (first) maximal element
Var max(const Var& a, int axis, bool keepdim = false);

// ---- softmax family over the last axis (ops_softmax.cpp) ----
Var softmax(const Var& a);
Var log_softmax(const Var& a);

// ---- matrix product (ops_matmul.cpp) ----
// op(a) @ op(b), batched, leading dims broadcast; see core/matmul.h.
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);

// ---- shape (ops_shape.cpp) ----
Var reshape(const Var& a, const Shape& shape);
Var transpose(const Var& a, int d0, int d1);
Var permute(const Var& a, const std::vector<int>& dims);

}  // namespace qkv
