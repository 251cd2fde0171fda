#!/usr/bin/env bash
# `make install PREFIX=...` gives a user everything to build their own program:
# installs into a scratch prefix (reusing the library `make test` built: the
# install must compile nothing), then builds a program that lives outside the
# source tree with exactly the compile command README.md prints, runs it and
# checks its numbers; builds a gradient check with the float64 library
# (qkv64.pc) that must catch a custom op's backward off by 1e-4. Also:
# DESTDIR stages the files while qkv.pc and qkv64.pc keep the real prefix.
source "$(dirname "$0")/lib.bash"
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "$root" && cd "$QKV_BIN" && pwd)
# Install what this run built: its build directory, and the sanitizer build
# when `make test SANITIZE=1` runs us.
build=$(dirname "$bin")
san=0
case "$(basename "$bin")" in san-*) san=1 ;; esac
# Not part of the outer make's job server.
qmake() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C "$root" BUILD="$build" SANITIZE=$san "$@"; }

prefix="$QKV_TMP/prefix"
qmake install PREFIX="$prefix" >"$QKV_TMP/install.log" 2>&1 || { cat "$QKV_TMP/install.log"; fail "make install failed"; }
if grep -E '(^| )(g\+\+|c\+\+|cc) .* -c ' "$QKV_TMP/install.log"; then fail "make install recompiled the library"; fi
[ -f "$prefix/include/qkv/models/transformer.h" ] || fail "no include/qkv/models/transformer.h"
[ -f "$prefix/include/qkv/autograd/node.h" ] || fail "no include/qkv/autograd/node.h"
[ -f "$prefix/include/qkv/data/loaders.h" ] || fail "no include/qkv/data/loaders.h"
cmp -s "$prefix/lib/libqkv.a" "$bin/libqkv.a" || fail "lib/libqkv.a is not the built $bin/libqkv.a"
[ -f "$prefix/lib/pkgconfig/qkv.pc" ] || fail "no lib/pkgconfig/qkv.pc"
mode=$(basename "$bin"); mode=${mode%-f32}
cmp -s "$prefix/lib/libqkv64.a" "$build/$mode-f64/libqkv.a" || fail "lib/libqkv64.a is not the built $build/$mode-f64/libqkv.a"
[ -f "$prefix/lib/pkgconfig/qkv64.pc" ] || fail "no lib/pkgconfig/qkv64.pc"

# The user's program, in a directory of its own.
user="$QKV_TMP/user"
mkdir -p "$user"
cat > "$user/my.cpp" <<'CPP'
// A gradient through the library's sgemm: y = x W^T + b, L = y^2.
#include <iostream>

#include "autograd/qkv_autograd.h"
#include "nn/linear.h"
using namespace qkv;

int main() {
  nn::Linear fc(2, 1);
  fc.weight.data().copy_(Tensor::from_vector({1, 2}, {1, 2}));
  fc.bias.data().fill_(0.5);
  Var x(Tensor::from_vector({3, 4}, {1, 2}));
  Var y = fc(x);                    // 1*3 + 2*4 + 0.5 = 11.5
  Var loss = sum(y * y);
  loss.backward();                  // dL/dW = 2 y x = (69, 92), dL/db = 2 y = 23
  const Tensor& gw = fc.weight.grad();
  std::cout << "y " << y.item() << " dW " << gw.at({0, 0}) << " " << gw.at({0, 1})
            << " db " << fc.bias.grad().item() << " " << real_name << "\n";
}
CPP

# The README's compile command, verbatim (it must still be there).
cmd='g++ -O2 my.cpp -o my $(pkg-config --cflags --libs qkv)'
grep -qF -- "$cmd" "$root/README.md" || fail "README.md no longer shows: $cmd"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs qkv)
case "$flags" in *"$root"*) fail "the installed flags point into the source tree: $flags" ;; esac
(cd "$user" && eval "$cmd") >"$QKV_TMP/cc.log" 2>&1 || { cat "$QKV_TMP/cc.log"; fail "compile failed: $cmd"; }
expect_ok "$user/my"
expect_out "y 11.5 dW 69 92 db 23 float32"

# The float64 library (qkv64.pc) for a user's gradcheck: a custom op whose
# backward is off by a relative 1e-4 fails it, the right one passes (the
# float32 library's tolerances, 1e-2, cannot tell them apart).
cat > "$user/grad.cpp" <<'CPP'
// SiLU, with its backward scaled by (1 + err), err = argv[1].
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "autograd/qkv_autograd.h"
using namespace qkv;

double err = 0;

struct SiluNode : Node {
  Tensor x;
  const char* name() const override { return "silu"; }
  TensorList backward(const Tensor& g) override {
    Tensor dx = Tensor::empty(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const real s = 1 / (1 + std::exp(-x.data()[i]));
      dx.data()[i] = g.data()[i] * (s + x.data()[i] * s * (1 - s)) * real(1 + err);
    }
    return {dx};
  }
  void release_saved() override { x = Tensor(); }
};

Var silu(const Var& a) {
  Tensor y = Tensor::empty(a.data().shape());
  for (int64_t i = 0; i < y.numel(); ++i) y.data()[i] = a.data().data()[i] / (1 + std::exp(-a.data().data()[i]));
  auto node = make_node<SiluNode>();
  node->x = a.data();
  return make_result(y, node, {a});
}

int main(int argc, char** argv) {
  err = std::atof(argv[1]);
  Var x(Tensor::from_vector({-2, -0.5, 0.3, 1, 3}), /*requires_grad=*/true);
  GradcheckResult r = gradcheck([](const std::vector<Var>& v) { return silu(v[0]); }, {x});
  std::cout << real_name << " gradcheck " << (r.ok ? "passed" : "failed") << "\n";
  return r.ok ? 0 : 1;
}
CPP
cmd64='g++ -O2 grad.cpp -o grad $(pkg-config --cflags --libs qkv64)'
grep -qF -- "$cmd64" "$root/docs/custom-ops.md" || fail "docs/custom-ops.md no longer shows: $cmd64"
(cd "$user" && eval "$cmd64") >"$QKV_TMP/cc64.log" 2>&1 || { cat "$QKV_TMP/cc64.log"; fail "compile failed: $cmd64"; }
expect_ok "$user/grad" 0
[ "$(cat "$QKV_TMP/out")" = "float64 gradcheck passed" ] || { cat "$QKV_TMP/out"; fail "qkv64: the right SiLU did not pass"; }
expect_fail "$user/grad" 1e-4
[ "$(cat "$QKV_TMP/out")" = "float64 gradcheck failed" ] || { cat "$QKV_TMP/out"; fail "qkv64: a 1e-4 error was not caught"; }

# docs/library.md's no-install command, verbatim, with QKV = this checkout
# (it names build/rel-f32, so only for the release build).
if [ "$san" = 0 ] && [ "$bin" = "$root/build/rel-f32" ]; then
  cmd2='g++ -O2 my.cpp -o my $(PKG_CONFIG_PATH=$QKV/build/rel-f32/pkgconfig pkg-config --cflags --libs qkv)'
  grep -qF -- "$cmd2" "$root/docs/library.md" || fail "docs/library.md no longer shows: $cmd2"
  rm -f "$user/my"
  (cd "$user" && unset PKG_CONFIG_PATH && QKV="$root" && eval "$cmd2") >"$QKV_TMP/cc2.log" 2>&1 ||
    { cat "$QKV_TMP/cc2.log"; fail "compile failed: $cmd2"; }
  expect_ok "$user/my"
  expect_out "y 11.5 dW 69 92 db 23 float32"
fi

# DESTDIR: files go under the staging root, qkv.pc names the final prefix.
qmake install PREFIX=/opt/qkv DESTDIR="$QKV_TMP/stage" >"$QKV_TMP/install2.log" 2>&1 ||
  { cat "$QKV_TMP/install2.log"; fail "make install DESTDIR=... failed"; }
[ -f "$QKV_TMP/stage/opt/qkv/lib/libqkv.a" ] || fail "DESTDIR: no stage/opt/qkv/lib/libqkv.a"
[ -f "$QKV_TMP/stage/opt/qkv/include/qkv/core/tensor.h" ] || fail "DESTDIR: no headers"
grep -qx 'prefix=/opt/qkv' "$QKV_TMP/stage/opt/qkv/lib/pkgconfig/qkv.pc" || fail "DESTDIR leaked into qkv.pc"
grep -qx 'prefix=/opt/qkv' "$QKV_TMP/stage/opt/qkv/lib/pkgconfig/qkv64.pc" || fail "DESTDIR leaked into qkv64.pc"
echo "installed, compiled outside the tree and ran: $(cat "$QKV_TMP/out")"
