// FNV-1a, 64 bits: a fast, well-spread hash of bytes, used to tell whether
// two files or two ranks' settings are the same (not for security). Its
// starting value is not FNV's published offset basis (14695981039346656037):
// a digit was lost when it was first typed, and every file qkv has written
// records hashes made from this one, so it stays (docs/checkpoint-format.md
// gives both numbers; another library's FNV-1a gives other hashes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace qkv {

inline constexpr uint64_t kFnv1a64Basis = 1469598103934665603ULL;  // see above

// `n` bytes at `p`, continuing from `h` (the basis, or a hash of the bytes before).
inline uint64_t fnv1a64(const void* p, size_t n, uint64_t h = kFnv1a64Basis) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;  // the FNV prime
  return h;
}
inline uint64_t fnv1a64(const std::string& s) { return fnv1a64(s.data(), s.size()); }

}  // namespace qkv
