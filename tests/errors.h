// Shared helpers for tests of error messages.
#pragma once
#include <string>

#include "core/error.h"

namespace qkv::testing {

// The message of the qkv::Error that f() throws, or "<no throw>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no throw>";
}

inline bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace qkv::testing
