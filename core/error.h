// qkv::Error: every failure the user can cause is reported with this type,
// with a message that names the op and the shapes involved, e.g.
//   matmul: (2,3) x (4,5): inner dims 3 != 4
//
// A message that quotes a value taken from a file or from the user (a tensor
// name, a dtype, a metadata key, a config value) quotes brief(value): one
// short line, whatever the file holds.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// `value` as an error message quotes it: control characters escaped (\n, \t,
// \r, \x1b, ...; so are bytes that are not UTF-8), and a value longer than
// about `max` characters cut there, at a character boundary, and followed by
// "... (N bytes)" saying how long it was:
//   brief("a<TAB>b")                  -> a\tb
//   brief(std::string(1 << 20, 'x'))  -> 200 x's, then "... (1048576 bytes)"
inline std::string brief(const std::string& value, size_t max = 200) {
  static const char hex[] = "0123456789abcdef";
  auto escaped = [](unsigned char c) {
    if (c == '\n') return std::string("\\n");
    if (c == '\t') return std::string("\\t");
    if (c == '\r') return std::string("\\r");
    return std::string{'\\', 'x', hex[c >> 4], hex[c & 15]};
  };
  std::string out;
  size_t i = 0;
  while (i < value.size() && out.size() < max) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      out += escaped(c);
      ++i;
      continue;
    }
    // A UTF-8 character is copied whole (never cut in two); a byte that does
    // not start one (a stray continuation byte, a truncated sequence) is escaped.
    const size_t len = c < 0x80                 ? 1
                       : c >= 0xc2 && c <= 0xdf ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
    bool whole = len > 0 && i + len <= value.size();
    for (size_t k = 1; whole && k < len; ++k)
      whole = (static_cast<unsigned char>(value[i + k]) & 0xc0) == 0x80;
    if (!whole) {
      out += escaped(c);
      ++i;
      continue;
    }
    out.append(value, i, len);
    i += len;
  }
  if (i < value.size()) out += "... (" + std::to_string(value.size()) + " bytes)";
  return out;
}

}  // namespace qkv
