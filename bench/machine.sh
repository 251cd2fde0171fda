# The machine a benchmark run is filed under, sourced by bench/run.sh and
# tested on its own by tests/cli/bench_machine.sh (no benchmark is run).
#
#   bench_machine BUILD_DIR [CPUINFO]
#
# reads the CPU's flags from CPUINFO (default /proc/cpuinfo) and the
# instruction set the library was compiled for from BUILD_DIR/pkgconfig/qkv.pc
# (its isa= line: make's -march=native, the building machine's), and sets
#   cpu_isa    "AVX-512", "AVX2 only" or "neither AVX2 nor AVX-512"
#   built_isa  avx512f, avx2 or x86-64
#   ISA_KIND   the block of tables the run is filed under: avx512, avx2, or
#              avx2-emulated (an AVX-512 machine running a library built for
#              AVX2, or OpenBLAS told OPENBLAS_CORETYPE)
#   cpu_bf16   how many CPU lines have avx512_bf16 (0: bf16 is emulated)
#   BENCH_ISA  the line the report names the machine by, with the CPU lines
#              that have avx512f and avx512_bf16 counted
# Returns 1 with a message when qkv.pc is missing or names no isa: a run whose
# build is unknown would be filed as emulated on an AVX-512 machine.
bench_machine() {
  local build=$1 info=${2:-/proc/cpuinfo} pc="$1/pkgconfig/qkv.pc" n512 nbf16
  built_isa=$(sed -n 's/^isa=//p' "$pc" 2>/dev/null || true)
  if [ -z "$built_isa" ]; then
    echo "run.sh: $pc $([ -f "$pc" ] && echo "names no isa" || echo "not found"): it records" \
      "the instruction set the library was built for (make bench builds build/rel-f32's)" >&2
    return 1
  fi
  n512=$(grep -cw avx512f "$info" || true)
  nbf16=$(grep -cw avx512_bf16 "$info" || true)
  cpu_bf16=$nbf16
  if [ "$n512" -gt 0 ]; then
    cpu_isa="AVX-512"
  elif grep -qw avx2 "$info"; then
    cpu_isa="AVX2 only"
  else
    cpu_isa="neither AVX2 nor AVX-512"
  fi
  if [ "$cpu_isa" = "AVX-512" ]; then
    if [ "$built_isa" = avx512f ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
      ISA_KIND=avx512
    else
      ISA_KIND=avx2-emulated
    fi
  else
    ISA_KIND=avx2
  fi
  BENCH_ISA="$cpu_isa (grep -c avx512f /proc/cpuinfo = $n512, grep -c avx512_bf16 /proc/cpuinfo = $nbf16); library built with -march=native for $built_isa${OPENBLAS_CORETYPE:+, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE}"
}
