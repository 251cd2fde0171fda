// The rules and byte order the safetensors reader (io/safetensors.cpp) and
// writer (io/safetensors_write.cpp) share: whatever the writer refuses, the
// reader refuses, and a file the reader accepts writes back (the fuzzer in
// fuzz/ checks this round trip). Internal to io/.
#pragma once
#include <cstdint>
#include <string>

namespace qkv::safetensors_detail {

// ---- the rules reader and writer share ----------------------------------------
// Whatever the writer refuses, the reader refuses (and the converse: a file
// the reader accepts writes back), so a file read and written again is the
// same file; the fuzzer (fuzz/) checks this round trip.

// Why `name` cannot name a tensor, or nullptr when it can.
inline const char* bad_tensor_name(const std::string& name) {
  if (name.empty()) return "a tensor has an empty name";
  if (name == "__metadata__") return "'__metadata__' is reserved and cannot name a tensor";
  return nullptr;
}

// ---- little-endian byte order, independent of the host's --------------------
inline uint64_t load_le(const unsigned char* p, int nbytes) {
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline void store_le(unsigned char* p, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace qkv::safetensors_detail
