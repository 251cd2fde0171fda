// FNV-1a, 64 bits: a fast, well-spread hash of bytes, used to tell whether
// two files or two ranks' settings are the same (not for security).
#pragma once
#include <cstdint>
#include <string>

namespace qkv {

inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;                       // the FNV offset basis
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;  // the FNV prime
  return h;
}

}  // namespace qkv
