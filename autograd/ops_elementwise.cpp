// Elementwise ops: forward and backward side by side. Binary ops broadcast;
// their backward sums the gradient back to each input's shape (sum_to).
// Every op has the same shape by design (micrograd's): a Node saving what its
// derivative needs, backward with the derivative in a comment, and the
// function that runs the core kernel and records the node. `duplicates`
// pairs them for that shape; each differs in its maths, which is the point.
#include <cmath>
#include <memory>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/elementwise.h"

namespace qkv {

// ---- a + b -------------------------------------------------------------------
struct AddNode : Node {
  Shape a_shape, b_shape;
  const char* name() const override { return "add"; }
  OpDoc doc() const override {
    return {"y = a + b", "da = dy, db = dy (each summed back over its broadcast axes)",
            "docs/primitives.md#add"};
  }
  TensorList backward(const Tensor& g) override {
    return {needs_grad(0) ? sum_to(g, a_shape) : Tensor(),
            needs_grad(1) ? sum_to(g, b_shape) : Tensor()};
  }
};
Var add(const Var& a, const Var& b) {
  auto n = make_node<AddNode>();
  n->a_shape = a.shape();
  n->b_shape = b.shape();
  return make_result(add(a.data(), b.data()), n, {a, b});
}

// ---- a - b -------------------------------------------------------------------
struct SubNode : Node {
  Shape a_shape, b_shape;
  const char* name() const override { return "sub"; }
  OpDoc doc() const override {
    return {"y = a - b", "da = dy, db = -dy (each summed back over its broadcast axes)",
            "docs/primitives.md#sub"};
  }
  TensorList backward(const Tensor& g) override {
    return {needs_grad(0) ? sum_to(g, a_shape) : Tensor(),
            needs_grad(1) ? sum_to(neg(g), b_shape) : Tensor()};
  }
};
Var sub(const Var& a, const Var& b) {
  auto n = make_node<SubNode>();
  n->a_shape = a.shape();
  n->b_shape = b.shape();
  return make_result(sub(a.data(), b.data()), n, {a, b});
}

// ---- a * b -------------------------------------------------------------------
struct MulNode : Node {
  Tensor a, b;
  const char* name() const override { return "mul"; }
  OpDoc doc() const override {
    return {"y = a * b", "da = dy * b, db = dy * a (each summed back over its broadcast axes)",
            "docs/primitives.md#mul"};
  }
  TensorList backward(const Tensor& g) override {
    return {needs_grad(0) ? sum_to(mul(g, b), a.shape()) : Tensor(),
            needs_grad(1) ? sum_to(mul(g, a), b.shape()) : Tensor()};
  }
  void release_saved() override { a = b = Tensor(); }
};
Var mul(const Var& a, const Var& b) {
  auto n = make_node<MulNode>();
  n->a = a.data();
  n->b = b.data();
  return make_result(mul(a.data(), b.data()), n, {a, b});
}

// ---- a / b -------------------------------------------------------------------
struct DivNode : Node {
  Tensor a, b;
  const char* name() const override { return "div"; }
  OpDoc doc() const override {
    return {"y = a / b",
            "da = dy / b, db = -dy * a / b^2 (each summed back over its broadcast axes)",
            "docs/primitives.md#div"};
  }
  TensorList backward(const Tensor& g) override {
    return {needs_grad(0) ? sum_to(div(g, b), a.shape()) : Tensor(),
            needs_grad(1) ? sum_to(neg(div(mul(g, a), mul(b, b))), b.shape()) : Tensor()};
  }
  void release_saved() override { a = b = Tensor(); }
};
Var div(const Var& a, const Var& b) {
  auto n = make_node<DivNode>();
  n->a = a.data();
  n->b = b.data();
  return make_result(div(a.data(), b.data()), n, {a, b});
}

// ---- scalar forms ---------------------------------------------------------------
struct AddScalarNode : Node {
  const char* name() const override { return "add_scalar"; }
  OpDoc doc() const override { return {"y = a + s", "da = dy", "docs/primitives.md#add_scalar"}; }
  TensorList backward(const Tensor& g) override { return {g}; }  // d(a+s)/da = 1
};
Var add(const Var& a, real s) {
  return make_result(add(a.data(), s), make_node<AddScalarNode>(), {a});
}

struct MulScalarNode : Node {
  real s = 1;
  const char* name() const override { return "mul_scalar"; }
  OpDoc doc() const override {
    return {"y = s * a", "da = s * dy", "docs/primitives.md#mul_scalar"};
  }
  TensorList backward(const Tensor& g) override { return {mul(g, s)}; }  // d(sa)/da = s
};
Var mul(const Var& a, real s) {
  auto n = make_node<MulScalarNode>();
  n->s = s;
  return make_result(mul(a.data(), s), n, {a});
}

struct RsubNode : Node {
  const char* name() const override { return "rsub"; }
  OpDoc doc() const override { return {"y = s - a", "da = -dy", "docs/primitives.md#rsub"}; }
  TensorList backward(const Tensor& g) override { return {neg(g)}; }  // d(s-a)/da = -1
};
Var rsub(real s, const Var& a) {
  return make_result(rsub(s, a.data()), make_node<RsubNode>(), {a});
}

struct RdivNode : Node {
  Tensor a;
  real s = 1;
  const char* name() const override { return "rdiv"; }
  OpDoc doc() const override {
    return {"y = s / a", "da = -s * dy / a^2", "docs/primitives.md#rdiv"};
  }
  TensorList backward(const Tensor& g) override { return {mul(div(g, mul(a, a)), -s)}; }
  void release_saved() override { a = Tensor(); }
};
Var rdiv(real s, const Var& a) {
  auto n = make_node<RdivNode>();
  n->a = a.data();
  n->s = s;
  return make_result(rdiv(s, a.data()), n, {a});
}

// ---- unary ------------------------------------------------------------------------
struct NegNode : Node {
  const char* name() const override { return "neg"; }
  OpDoc doc() const override { return {"y = -a", "da = -dy", "docs/primitives.md#neg"}; }
  TensorList backward(const Tensor& g) override { return {neg(g)}; }
};
Var neg(const Var& a) { return make_result(neg(a.data()), make_node<NegNode>(), {a}); }

struct ExpNode : Node {
  Tensor y;  // exp(a): its own derivative
  const char* name() const override { return "exp"; }
  OpDoc doc() const override {
    return {"y = exp(a)", "da = dy * y  (exp is its own derivative)", "docs/primitives.md#exp"};
  }
  TensorList backward(const Tensor& g) override { return {mul(g, y)}; }  // dy/da = y
  void release_saved() override { y = Tensor(); }
};
Var exp(const Var& a) {
  auto n = make_node<ExpNode>();
  Tensor y = exp(a.data());
  n->y = y;
  return make_result(y, n, {a});
}

struct LogNode : Node {
  Tensor a;
  const char* name() const override { return "log"; }
  OpDoc doc() const override { return {"y = log(a)", "da = dy / a", "docs/primitives.md#log"}; }
  TensorList backward(const Tensor& g) override { return {div(g, a)}; }  // d log a = 1/a
  void release_saved() override { a = Tensor(); }
};
Var log(const Var& a) {
  auto n = make_node<LogNode>();
  n->a = a.data();
  return make_result(log(a.data()), n, {a});
}

struct SqrtNode : Node {
  Tensor y;
  const char* name() const override { return "sqrt"; }
  OpDoc doc() const override {
    return {"y = sqrt(a)", "da = dy / (2 y)", "docs/primitives.md#sqrt"};
  }
  TensorList backward(const Tensor& g) override { return {div(mul(g, real(0.5)), y)}; }
  void release_saved() override { y = Tensor(); }
};
Var sqrt(const Var& a) {
  auto n = make_node<SqrtNode>();
  Tensor y = sqrt(a.data());
  n->y = y;
  return make_result(y, n, {a});
}

struct PowNode : Node {
  Tensor a;
  real p = 1;
  const char* name() const override { return "pow"; }
  OpDoc doc() const override {
    return {"y = a^p", "da = dy * p a^(p-1)", "docs/primitives.md#pow"};
  }
  TensorList backward(const Tensor& g) override { return {pow_backward(g, a, p)}; }  // p a^(p-1)
  void release_saved() override { a = Tensor(); }
};
Var pow(const Var& a, real p) {
  auto n = make_node<PowNode>();
  n->a = a.data();
  n->p = p;
  return make_result(pow(a.data(), p), n, {a});
}

struct ReluNode : Node {
  Tensor a;
  const char* name() const override { return "relu"; }
  OpDoc doc() const override {
    return {"y = max(a, 0)", "da = dy * 1[a > 0]",
            "docs/feedforward-backward.md#the-feed-forward-block-backward-step-by-step"};
  }
  TensorList backward(const Tensor& g) override { return {relu_backward(g, a)}; }  // 1[a > 0]
  void release_saved() override { a = Tensor(); }
};
Var relu(const Var& a) {
  auto n = make_node<ReluNode>();
  n->a = a.data();
  return make_result(relu(a.data()), n, {a});
}

struct GeluNode : Node {
  Tensor a;
  const char* name() const override { return "gelu"; }
  OpDoc doc() const override {
    return {"y = a Phi(a)  (exact GELU: Phi the normal CDF, through erf)",
            "da = dy * (Phi(a) + a phi(a))",
            "docs/feedforward-backward.md#the-feed-forward-block-backward-step-by-step"};
  }
  TensorList backward(const Tensor& g) override { return {gelu_backward(g, a)}; }  // Phi + a phi
  void release_saved() override { a = Tensor(); }
};
Var gelu(const Var& a) {
  auto n = make_node<GeluNode>();
  n->a = a.data();
  return make_result(gelu(a.data()), n, {a});
}

struct TanhNode : Node {
  Tensor y;
  const char* name() const override { return "tanh"; }
  OpDoc doc() const override {
    return {"y = tanh(a)", "da = dy * (1 - y^2)", "docs/primitives.md#tanh"};
  }
  TensorList backward(const Tensor& g) override { return {tanh_backward(g, y)}; }  // 1 - y^2
  void release_saved() override { y = Tensor(); }
};
Var tanh(const Var& a) {
  auto n = make_node<TanhNode>();
  Tensor y = tanh(a.data());
  n->y = y;
  return make_result(y, n, {a});
}

struct SigmoidNode : Node {
  Tensor y;
  const char* name() const override { return "sigmoid"; }
  OpDoc doc() const override {
    return {"y = 1 / (1 + exp(-a))", "da = dy * y (1 - y)", "docs/primitives.md#sigmoid"};
  }
  TensorList backward(const Tensor& g) override { return {sigmoid_backward(g, y)}; }  // y(1-y)
  void release_saved() override { y = Tensor(); }
};
Var sigmoid(const Var& a) {
  auto n = make_node<SigmoidNode>();
  Tensor y = sigmoid(a.data());
  n->y = y;
  return make_result(y, n, {a});
}

}  // namespace qkv
