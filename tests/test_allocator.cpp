// The tensor allocator's counters (core/allocator.h): what benchmarks read to
// report peak tensor memory.
#include <doctest/doctest.h>

#include "core/allocator.h"
#include "core/tensor.h"

using namespace qkv;

TEST_CASE(
    "reset_peak_stats starts the peaks afresh, so the peak of one stretch of work can be read") {
  {
    Tensor big = Tensor::empty({1 << 20});  // 4 MiB in float32, freed at once
  }
  const AllocatorStats before = allocator_stats();
  CHECK(before.peak_in_use >= before.bytes_in_use + (4 << 20));  // the big tensor's peak
  reset_peak_stats();
  AllocatorStats s = allocator_stats();
  CHECK(s.peak_in_use == s.bytes_in_use);
  CHECK(s.peak_bytes == s.bytes_in_use + s.bytes_cached);
  {
    Tensor small = Tensor::empty({1000});  // 4000 bytes, rounded up to its size class
    s = allocator_stats();
    CHECK(s.peak_in_use == s.bytes_in_use);
    CHECK(s.peak_in_use >= before.bytes_in_use + 4000);
    CHECK(s.peak_in_use < before.bytes_in_use + (1 << 20));
  }
  CHECK(allocator_stats().peak_in_use == s.peak_in_use);  // freeing leaves the peak
}
