// core/pool: freed blocks are handed out again by size class, and two threads
// can allocate and free at once without ever sharing a block.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/pool.h"

using namespace qkv;

// Sanitizer builds pass every request through to operator new (so ASan sees
// each block's lifetime): nothing is reused there.
TEST_CASE("the pool hands a freed block out again for the next request of its size class" *
          doctest::skip(!kPoolCaches)) {
  // Sizes of one class: small ones round up to 16 bytes, big ones (> 1 KiB)
  // to a power of two.
  const size_t same_class[][2] = {{33, 48}, {1009, 1024}, {1025, 2048}, {3000, 4096}};
  for (const auto& sizes : same_class) {
    CAPTURE(sizes[0]);
    void* p = pool_alloc(sizes[0]);
    pool_free(p, sizes[0]);
    const PoolStats before = pool_stats();
    void* q = pool_alloc(sizes[1]);
    const PoolStats after = pool_stats();
    CHECK(q == p);
    CHECK(after.system_allocs == before.system_allocs);
    CHECK(after.reuses == before.reuses + 1);
    std::memset(q, 0xab, sizes[1]);  // the whole class size is usable
    pool_free(q, sizes[1]);
  }
  // A request of another class does not take the block.
  void* p = pool_alloc(64);
  pool_free(p, 64);
  void* q = pool_alloc(80);
  CHECK(q != p);
  pool_free(q, 80);
}

TEST_CASE("containers and shared objects on the pool reuse their blocks once warm" *
          doctest::skip(!kPoolCaches)) {
  auto round = [] {
    PoolVector<int64_t> v;
    for (int64_t i = 0; i < 300; ++i) v.push_back(i);  // grows through several classes
    auto s = make_pooled<std::vector<int>>(5, 7);      // the vector inside is std::allocator's
    CHECK(v[299] == 299);
    CHECK((*s)[4] == 7);
  };
  round();
  const int64_t misses = pool_stats().system_allocs;
  for (int i = 0; i < 5; ++i) round();
  CHECK(pool_stats().system_allocs == misses);
}

TEST_CASE("two threads allocating and freeing at once never get the same block") {
  const int64_t in_use = pool_stats().blocks_in_use;
  auto work = [](uint8_t tag) {
    std::vector<std::pair<uint8_t*, size_t>> held;
    bool ok = true;
    for (int i = 0; i < 20000; ++i) {
      const size_t bytes = 8 + static_cast<size_t>((i * 37 + tag * 11) % 1500);
      auto* p = static_cast<uint8_t*>(pool_alloc(bytes));
      std::memset(p, tag, bytes);
      held.push_back({p, bytes});
      if (held.size() > 16 || i % 3 == 0) {  // free in another order than allocated
        auto [q, n] = held[held.size() / 2];
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(held.size() / 2));
        for (size_t k = 0; k < n; ++k) ok &= q[k] == tag;  // nobody else wrote here
        pool_free(q, n);
      }
    }
    for (auto [q, n] : held) {
      for (size_t k = 0; k < n; ++k) ok &= q[k] == tag;
      pool_free(q, n);
    }
    return ok;
  };
  bool ok1 = false, ok2 = false;
  std::thread t1([&] { ok1 = work(1); });
  std::thread t2([&] { ok2 = work(2); });
  t1.join();
  t2.join();
  CHECK(ok1);
  CHECK(ok2);
  CHECK(pool_stats().blocks_in_use == in_use);
}
