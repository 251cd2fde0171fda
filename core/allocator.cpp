#include "core/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"

// Tensor storage's caching pool. core/pool.cpp has the same outline for
// small host objects; the two differ in alignment, classes and bookkeeping.
namespace qkv {
namespace {

// Sizes are rounded up so that near-equal requests share a pool bucket:
// to 64 bytes below 4 KiB, else to a multiple of 1/8 of the next power of two.
size_t size_class(size_t bytes) {
  if (bytes == 0) bytes = 64;
  if (bytes <= 4096) return (bytes + 63) & ~size_t(63);
  size_t p = 4096;
  while (p < bytes) p <<= 1;
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

struct Pool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_blocks;
  AllocatorStats stats;
};

Pool& pool() {
  // Leaked on purpose: tensors in static objects may be freed after main().
  static Pool* p = new Pool;
  return *p;
}

}  // namespace

void* storage_alloc(size_t bytes) {
  // Past 2^62 bytes size_class would overflow (its loop doubles past 2^63).
  // Tensor::empty never asks for that much (check_shape caps a tensor at
  // 2^63 - 1 bytes and sizes this far up fail in the system allocator
  // anyway); this is for direct callers.
  if (bytes > (size_t(1) << 62))
    throw Error("storage_alloc: " + std::to_string(bytes) +
                " bytes requested, more than the 2^62-byte limit");
  const size_t sz = size_class(bytes);
  Pool& P = pool();
  {
    std::lock_guard<std::mutex> lock(P.mu);
    auto it = P.free_blocks.find(sz);
    if (it != P.free_blocks.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      P.stats.cache_hits++;
      P.stats.bytes_cached -= static_cast<int64_t>(sz);
      P.stats.bytes_in_use += static_cast<int64_t>(sz);
      if (P.stats.bytes_in_use > P.stats.peak_in_use) P.stats.peak_in_use = P.stats.bytes_in_use;
      return ptr;
    }
  }
  void* ptr = std::aligned_alloc(64, sz);
  if (!ptr) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(P.mu);
  P.stats.system_allocs++;
  P.stats.bytes_in_use += static_cast<int64_t>(sz);
  if (P.stats.bytes_in_use > P.stats.peak_in_use) P.stats.peak_in_use = P.stats.bytes_in_use;
  const int64_t total = P.stats.bytes_in_use + P.stats.bytes_cached;
  if (total > P.stats.peak_bytes) P.stats.peak_bytes = total;
  return ptr;
}

void storage_free(void* p, size_t bytes) {
  if (!p) return;
  const size_t sz = size_class(bytes);
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
#ifdef QKV_NO_ALLOC_CACHE
  // Sanitizer builds: give memory back at once so use-after-free is caught.
  std::free(p);
  P.stats.bytes_in_use -= static_cast<int64_t>(sz);
  return;
#endif
  P.free_blocks[sz].push_back(p);
  P.stats.bytes_in_use -= static_cast<int64_t>(sz);
  P.stats.bytes_cached += static_cast<int64_t>(sz);
}

AllocatorStats allocator_stats() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.stats;
}

void reset_peak_stats() {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  P.stats.peak_in_use = P.stats.bytes_in_use;
  P.stats.peak_bytes = P.stats.bytes_in_use + P.stats.bytes_cached;
}

}  // namespace qkv
