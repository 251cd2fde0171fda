#include "core/pool.h"

#include <mutex>
#include <new>

// Alike in outline to core/allocator.cpp (a leaked, locked pool of size
// classes) but a different pool: this one is for small host objects (free
// lists threaded through the blocks, 16-byte classes); allocator.cpp is for
// tensor storage (64-byte aligned, power-of-two classes, with stats).
namespace qkv {
namespace {

// Size classes: 16, 32, ..., 1024 bytes (64 classes), then 2 KiB, 4 KiB, ...
// A small request wastes under 16 bytes; a big one (a long list of token ids,
// a graph's topological order) at most half its block.
constexpr size_t kStep = 16, kSmallMax = 1024;
constexpr int kSmallClasses = static_cast<int>(kSmallMax / kStep);
constexpr int kFirstBigLog2 = 11;  // 2 KiB
constexpr int kClasses = kSmallClasses + 64 - kFirstBigLog2;

static_assert(kStep % kPoolAlign == 0, "size classes keep blocks aligned");

// The class of a request, and the size of that class's blocks.
int size_class(size_t bytes, size_t& block) {
  if (bytes <= kSmallMax) {
    const size_t k = bytes == 0 ? 1 : (bytes + kStep - 1) / kStep;
    block = k * kStep;
    return static_cast<int>(k) - 1;
  }
  const int log2 = 64 - __builtin_clzll(bytes - 1);  // smallest power of two >= bytes
  block = size_t(1) << log2;
  return kSmallClasses + log2 - kFirstBigLog2;
}

// A block on a free list holds the link to the next one.
struct FreeBlock {
  FreeBlock* next;
};

struct ObjectPool {
  std::mutex mu;
  FreeBlock* free_list[kClasses] = {};
  PoolStats stats;
};

ObjectPool& object_pool() {
  // Leaked on purpose: objects in static storage may free blocks after main().
  static ObjectPool* p = new ObjectPool;
  return *p;
}

}  // namespace

void* pool_alloc(size_t bytes) {
  // Past 2^62 bytes size_class would shift by 64; no such block exists anyway.
  if (bytes > (size_t(1) << 62)) throw std::bad_alloc();
  ObjectPool& P = object_pool();
  size_t block = bytes;
  if (kPoolCaches) {
    const int c = size_class(bytes, block);
    std::lock_guard<std::mutex> lock(P.mu);
    if (FreeBlock* b = P.free_list[c]) {
      P.free_list[c] = b->next;
      P.stats.reuses++;
      P.stats.blocks_in_use++;
      return b;
    }
  }
  void* p = ::operator new(block);  // a miss (every request, when passing through)
  std::lock_guard<std::mutex> lock(P.mu);
  P.stats.system_allocs++;
  P.stats.blocks_in_use++;
  P.stats.bytes_held += static_cast<int64_t>(block);
  return p;
}

void pool_free(void* p, size_t bytes) {
  if (!p) return;
  ObjectPool& P = object_pool();
  if (!kPoolCaches) {
    ::operator delete(p);  // sanitizer builds: gone at once, so use after free is caught
    std::lock_guard<std::mutex> lock(P.mu);
    P.stats.blocks_in_use--;
    P.stats.bytes_held -= static_cast<int64_t>(bytes);
    return;
  }
  size_t block;
  const int c = size_class(bytes, block);
  auto* b = static_cast<FreeBlock*>(p);
  std::lock_guard<std::mutex> lock(P.mu);
  b->next = P.free_list[c];
  P.free_list[c] = b;
  P.stats.blocks_in_use--;
}

PoolStats pool_stats() {
  ObjectPool& P = object_pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.stats;
}

}  // namespace qkv
