// The library is compiled with -march=native: its kernels use every
// instruction the building machine has (AVX2 and FMA, or AVX-512). On a CPU
// without them, the first kernel would die of SIGILL ("illegal instruction")
// far from the cause. This check runs when a program linked with libqkv.a
// starts, before main and before other static initialisers (priority 101),
// and is itself compiled for plain x86-64, so it runs anywhere: it names what
// the library needs and what to do, and exits with status 1.
#include <cstdio>
#include <cstdlib>

namespace {

#if defined(__x86_64__)
[[noreturn]] __attribute__((target("arch=x86-64"))) void lacks(const char* what) {
  std::fprintf(stderr,
               "qkv: this program's libqkv.a was built for %s (make builds with -march=native "
               "on the machine that builds it), which this CPU lacks; rebuild qkv on this "
               "machine (make clean && make) or build it for both (see docs/library.md)\n",
               what);
  std::_Exit(1);
}

__attribute__((constructor(101), target("arch=x86-64"))) void check_cpu() {
  __builtin_cpu_init();
#if defined(__AVX512F__)
  if (!__builtin_cpu_supports("avx512f")) lacks("AVX-512 (avx512f)");
#endif
#if defined(__AVX2__)
  if (!__builtin_cpu_supports("avx2")) lacks("AVX2");
#endif
#if defined(__FMA__)
  if (!__builtin_cpu_supports("fma")) lacks("FMA");
#endif
}
#endif

}  // namespace

namespace qkv {
// Whether the CPU runs AVX512-BF16 (vdpbf16ps): core/gemm_bf16.cpp asks
// before it uses its kernel. The library's -march=native may target it, but
// the kernel is chosen at run time only if the CPU has it.
bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}
}  // namespace qkv
