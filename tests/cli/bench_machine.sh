# bench/run.sh's machine label (bench/machine.sh), without running a benchmark:
# it matches /proc/cpuinfo's flags and the build's qkv.pc, files a library
# built for AVX2 on an AVX-512 CPU as emulated, and a build whose instruction
# set is unknown (no qkv.pc, as `make bench` on a fresh clone once had) stops
# run.sh before any run.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
source "$QKV_SRC/bench/machine.sh"
build() {  # build DIR ISA: a build folder whose qkv.pc records ISA
  mkdir -p "$1/pkgconfig" && printf 'prefix=/x\nisa=%s\nName: qkv\n' "$2" >"$1/pkgconfig/qkv.pc"
}
cpu() {  # cpu FILE FLAGS...: a two-CPU /proc/cpuinfo with these flags
  : >"$1"
  for i in 0 1; do printf 'processor\t: %s\nmodel name\t: Test CPU\nflags\t\t: fpu sse2 %s\n\n' \
    "$i" "${*:2}" >>"$1"; done
}
build b512 avx512f
build b2 avx2
cpu bf16 avx2 avx512f avx512bw avx512_bf16
cpu f512 avx2 avx512f avx512bw
cpu only2 avx2 fma

# These calls describe made-up machines, so the environment's own
# OPENBLAS_CORETYPE (some machines here set it) is left out of them: empty
# for the length of each call, as if unset. No OpenBLAS runs in this script.
OPENBLAS_CORETYPE= bench_machine b512 bf16
[ "$ISA_KIND" = avx512 ] || fail "an avx512f build on an AVX-512 CPU filed as $ISA_KIND"
[ "$BENCH_ISA" = "AVX-512 (grep -c avx512f /proc/cpuinfo = 2, grep -c avx512_bf16 /proc/cpuinfo = 2); library built with -march=native for avx512f" ] ||
  fail "label: $BENCH_ISA"
OPENBLAS_CORETYPE= bench_machine b512 f512
case "$BENCH_ISA" in *"avx512f /proc/cpuinfo = 2, grep -c avx512_bf16 /proc/cpuinfo = 0)"*) ;;
  *) fail "an AVX-512 CPU without bf16 labelled: $BENCH_ISA" ;; esac
OPENBLAS_CORETYPE= bench_machine b2 f512
[ "$ISA_KIND" = avx2-emulated ] || fail "an AVX2 build on an AVX-512 CPU filed as $ISA_KIND"
OPENBLAS_CORETYPE=Zen bench_machine b512 f512
[ "$ISA_KIND" = avx2-emulated ] || fail "OPENBLAS_CORETYPE on an AVX-512 CPU filed as $ISA_KIND"
OPENBLAS_CORETYPE= bench_machine b2 only2
[ "$ISA_KIND" = avx2 ] && [ "$cpu_isa" = "AVX2 only" ] || fail "an AVX2 CPU filed as $ISA_KIND"

# This machine: the label's counts are /proc/cpuinfo's, its kind follows from them.
build here "$(sed -n 's/^isa=//p' "$QKV_BIN/pkgconfig/qkv.pc" 2>/dev/null || echo avx2)"
bench_machine here
n512=$(grep -cw avx512f /proc/cpuinfo || true)
nbf16=$(grep -cw avx512_bf16 /proc/cpuinfo || true)
case "$BENCH_ISA" in
  *"(grep -c avx512f /proc/cpuinfo = $n512, grep -c avx512_bf16 /proc/cpuinfo = $nbf16)"*) ;;
  *) fail "this machine labelled $BENCH_ISA; /proc/cpuinfo: avx512f $n512, avx512_bf16 $nbf16" ;;
esac
if [ "$n512" -gt 0 ]; then [ "$cpu_isa" = AVX-512 ]; else [ "$cpu_isa" != AVX-512 ]; fi ||
  fail "this CPU (avx512f on $n512 lines) labelled $cpu_isa"

# No qkv.pc: run.sh stops before running anything, naming the file.
mkdir -p fresh && printf '#!/bin/sh\necho ran >"%s/ran"\n' "$QKV_TMP" >fresh/bench_train && chmod +x fresh/bench_train
BENCH_OUT="$QKV_TMP/B.md" expect_fail bash "$QKV_SRC/bench/run.sh" fresh
expect_out "fresh/pkgconfig/qkv.pc not found"
[ ! -e ran ] && [ ! -e B.md ] || fail "run.sh ran a benchmark without knowing the build's instruction set"
# make bench and make bench-torch build what run.sh reads (read from the
# Makefile: make -n would start the MPI build that bench's recipe names).
for t in bench bench-torch; do
  grep -Eq "^$t:.*[$][(]PC32[)]" "$QKV_SRC/Makefile" ||
    fail "make $t does not build the qkv.pc that bench/run.sh reads"
done
grep -q '^PC32 *:= *$(B32)/pkgconfig/qkv.pc$' "$QKV_SRC/Makefile" || fail "PC32 is not build/rel-f32's qkv.pc"
