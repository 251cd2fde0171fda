# A libqkv.a compiled for instructions the CPU lacks stops at start with a
# message naming them (core/cpu_check.cpp), instead of dying of SIGILL at its
# first kernel. core/cpu_check.cpp is compiled here for AVX-512 and linked
# into a program: on a CPU without avx512f it must refuse to start, on one
# with it it must run. qkv.pc records the instruction set of the build.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
printf 'int main() { return 0; }\n' > main.cpp
g++ -std=c++17 -O2 -mavx512f "$QKV_SRC/core/cpu_check.cpp" main.cpp -o for_avx512 ||
  fail "could not compile core/cpu_check.cpp for AVX-512"
if grep -qw avx512f /proc/cpuinfo; then
  expect_ok ./for_avx512
else
  expect_fail ./for_avx512
  expect_out "qkv: this program's libqkv.a was built for AVX-512 (avx512f)"
  expect_out "rebuild qkv on this machine"
fi
isa=$(sed -n 's/^isa=//p' "$QKV_BIN/pkgconfig/qkv.pc")
case "$isa" in avx512f|avx2|x86-64) ;; *) fail "qkv.pc records no instruction set (isa='$isa')" ;; esac
macros=$(g++ -march=native -dM -E -x c++ /dev/null)
want=x86-64
case "$macros" in *__AVX2__*) want=avx2 ;; esac
case "$macros" in *__AVX512F__*) want=avx512f ;; esac
case "$QKV_BIN" in *san-f32) ;; *) [ "$isa" = "$want" ] || fail "qkv.pc says isa=$isa, the compiler builds for $want" ;; esac
