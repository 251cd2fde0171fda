// qkv::Error: every failure the user can cause is reported with this type,
// with a message that names the op and the shapes involved, e.g.
//   matmul: (2,3) x (4,5): inner dims 3 != 4
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A value from a file or the command line, fit to quote in an error: control
// characters escaped (\n, \t, \xNN) and at most `max` characters, the rest
// replaced by "... (N bytes)", so a 50 MB value never becomes a 50 MB line.
inline std::string brief(const std::string& s, size_t max = 200) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (out.size() >= max) return out + "... (" + std::to_string(s.size()) + " bytes)";
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace qkv
