// Shared helpers for tests of error messages.
#pragma once
#include <doctest/doctest.h>

#include <initializer_list>
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

inline bool has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// Runs f, expecting a qkv::Error whose message contains every one of `parts`.
template <class F>
void check_error(F&& f, std::initializer_list<const char*> parts) {
  const std::string msg = error_of(f);
  INFO("message: " << msg);
  REQUIRE(msg != "<no throw>");
  for (const char* p : parts) CHECK(has(msg, p));
}

}  // namespace qkv::testing
