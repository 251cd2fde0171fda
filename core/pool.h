// A pool for the small blocks of a graph's bookkeeping: shared_ptr control
// blocks of Storage, Var and Node, the input lists of nodes, the gradient
// lists of backward, the engine's containers. Define-by-run makes all of them
// anew every step; tensor memory already comes from core/allocator.h, and this
// pool does the same for the rest, so a training step in steady state asks
// the system for nothing.
//
// Blocks are grouped by size class: multiples of 16 bytes up to 1 KiB, then
// powers of two. A freed block goes on its class's free list and is handed out
// again; blocks are never returned to the system, so the memory held is, for
// each class, the most blocks of that class ever in use at once. A list that
// grew (the engine's order of a big graph) leaves a block in every class it
// passed through, so the total can exceed the peak in use, but it stops
// growing once the largest graph has been built. (Tensor memory is the other
// cache, core/allocator.h, which can also be emptied.)
// One mutex guards the lists: any thread may allocate or free.
//
// In AddressSanitizer builds (and with QKV_NO_ALLOC_CACHE, as `make
// SANITIZE=1` sets) the pool passes every request straight to operator
// new/delete, so that ASan still sees each block's use after free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace qkv {

#if defined(__SANITIZE_ADDRESS__) || defined(QKV_NO_ALLOC_CACHE)
#define QKV_POOL_PASSTHROUGH 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_POOL_PASSTHROUGH 1
#endif
#endif
#ifdef QKV_POOL_PASSTHROUGH
inline constexpr bool kPoolCaches = false;
#else
inline constexpr bool kPoolCaches = true;
#endif

// Blocks are aligned for any fundamental type (16 bytes).
inline constexpr size_t kPoolAlign = alignof(std::max_align_t);

struct PoolStats {
  int64_t system_allocs = 0;  // blocks the pool had to get from operator new (misses)
  int64_t reuses = 0;         // blocks handed out again from a free list
  int64_t blocks_in_use = 0;  // handed out and not yet freed
  int64_t bytes_held = 0;     // all blocks ever obtained (in use or on a free list)
};

void* pool_alloc(size_t bytes);
void pool_free(void* p, size_t bytes);  // bytes as passed to pool_alloc
PoolStats pool_stats();

// An STL allocator over the pool, for containers and std::allocate_shared.
template <class T>
struct PoolAllocator {
  using value_type = T;
  static_assert(alignof(T) <= kPoolAlign, "PoolAllocator: over-aligned type");

  PoolAllocator() noexcept = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  T* allocate(size_t n) { return static_cast<T*>(pool_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pool_free(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const PoolAllocator<U>&) const noexcept {
    return false;
  }
};

// Standard containers whose blocks come from the pool.
template <class T>
using PoolVector = std::vector<T, PoolAllocator<T>>;
template <class K, class V>
using PoolMap =
    std::unordered_map<K, V, std::hash<K>, std::equal_to<K>, PoolAllocator<std::pair<const K, V>>>;
template <class K>
using PoolSet = std::unordered_set<K, std::hash<K>, std::equal_to<K>, PoolAllocator<K>>;

// std::make_shared with the object and its reference counts in one pooled block.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace qkv
