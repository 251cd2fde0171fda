// A caching allocator for tensor storage. Freed blocks are kept in a pool
// keyed by their size and handed out again, so a training loop that makes the
// same tensors every step stops calling the system allocator after the first
// step. The counters let benchmarks and tests check exactly that.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qkv {

struct AllocatorStats {
  int64_t system_allocs = 0;  // blocks obtained from the system (cache misses)
  int64_t cache_hits = 0;     // blocks reused from the pool
  int64_t bytes_in_use = 0;   // bytes handed out and not yet returned
  int64_t bytes_cached = 0;   // bytes parked in the pool
  int64_t peak_bytes = 0;     // peak of bytes_in_use + bytes_cached
  int64_t peak_in_use = 0;    // peak of bytes_in_use alone
};

// 64-byte aligned block of at least `bytes` bytes (rounded up to a size class).
void* storage_alloc(size_t bytes);
void storage_free(void* p, size_t bytes);
AllocatorStats allocator_stats();
// Starts the peaks afresh from now: peak_in_use = bytes_in_use, peak_bytes =
// bytes_in_use + bytes_cached (as torch.cuda.reset_peak_memory_stats), so a
// benchmark can read the peak of one step: reset, run it, read peak_in_use.
void reset_peak_stats();

}  // namespace qkv
