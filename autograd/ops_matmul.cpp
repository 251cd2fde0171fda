// The matrix product and its two backward products, all through sgemm with
// transpose flags (no transposed copies).
#include <memory>

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/elementwise.h"
#include "core/matmul.h"

namespace qkv {

struct MatmulNode : Node {
  Tensor a, b;
  bool ta = false, tb = false;
  const char* name() const override { return "matmul"; }
  OpDoc doc() const override {
    return {"C = A B  (either operand may be transposed; batch axes broadcast)",
            "dA = dC B^T,  dB = A^T dC  (summed back over broadcast batch axes)",
            "docs/matrix-rule.md#5-batches-broadcasts-and-transposes-what-the-code-uses"};
  }
  // C = A B  =>  dA = dC B^T,  dB = A^T dC.  With transposed operands
  // (C = A^T B etc.) the same identities give the four cases below; batch
  // dimensions that were broadcast are summed back (sum_to).
  TensorList backward(const Tensor& g) override {
    Tensor da, db;
    if (needs_grad(0)) {
      // ta: A is stored (K,M), dA_stored = (dC B^T)^T = op(B) dC^T
      da = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
      da = sum_to(da, a.shape());
    }
    if (needs_grad(1)) {
      // tb: B is stored (N,K), dB_stored = (A^T dC)^T = dC^T op(A)
      db = tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false);
      db = sum_to(db, b.shape());
    }
    return {da, db};
  }
  void release_saved() override { a = b = Tensor(); }
};

Var matmul(const Var& a, const Var& b, bool trans_a, bool trans_b) {
  auto n = make_node<MatmulNode>();
  Tensor y = matmul(a.data(), b.data(), trans_a, trans_b);
  n->a = a.data();
  n->b = b.data();
  n->ta = trans_a;
  n->tb = trans_b;
  return make_result(y, n, {a, b});
}

}  // namespace qkv
