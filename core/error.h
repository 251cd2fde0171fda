// qkv::Error: every failure the user can cause is reported with this type,
// with a message that names the op and the shapes involved, e.g.
//   matmul: (2,3) x (4,5): inner dims 3 != 4
//
// A message that quotes text taken from a file or from the user (a flag's
// value, a path, a tensor name, a dtype, a metadata key, a config value, a
// token) quotes brief(text): one short line, whatever the text holds. That is
// the one rule for quoting user text, everywhere.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace qkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// How much of a quoted value a message shows, in bytes of the quote.
inline constexpr size_t kBriefBytes = 60;

// The length of the well-formed UTF-8 character that starts at `s[i]`
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or 0
// when none starts there (a stray continuation byte, a cut sequence, 0xff).
inline size_t utf8_char_length(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  const size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
  if (len == 0 || i + len > s.size()) return 0;
  // The second byte's range is narrower after E0, ED, F0 and F4.
  const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
  const unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
  const unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
  if (c1 < lo || c1 > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  return len;
}

// `value` as a message quotes it: every byte that is not printable UTF-8 text
// (a control byte such as ESC, NUL, newline or DEL, a C1 control, a byte that is not
// UTF-8, a character cut short) shows as \xNN, and a value longer than about
// kBriefBytes is cut there, at a character boundary, followed by
// "... (N bytes)" saying how long it was:
//   brief("a<TAB>b")                  -> a\x09b
//   brief(std::string(1 << 20, 'x'))  -> 60 x's, then "... (1048576 bytes)"
inline std::string brief(const std::string& value) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < value.size() && out.size() < kBriefBytes) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    size_t len = c < 0x20 || c == 0x7f ? 0 : utf8_char_length(value, i);
    if (len == 2 && c == 0xc2 && static_cast<unsigned char>(value[i + 1]) < 0xa0)
      len = 0;  // U+0080..U+009F, the C1 controls (0xc2 0x9b is a terminal's CSI)
    if (len == 0) {
      out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
      ++i;
      continue;
    }
    out.append(value, i, len);  // a character is copied whole, never cut in two
    i += len;
  }
  if (i < value.size()) out += "... (" + std::to_string(value.size()) + " bytes)";
  return out;
}

// The choices a message offers, from a table: "a", "a or b", "a, b or c",
// each name(row) between `quote`s. One rule for every table's error:
//   one_of(norm_kinds(), [](const NormKind& k) { return k.name; })  -> layer or rms
template <class Table, class Name>
std::string one_of(const Table& rows, Name name, const std::string& quote = "") {
  std::string s;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i) s += i + 1 == rows.size() ? " or " : ", ";
    s += quote + std::string(name(rows[i])) + quote;
  }
  return s;
}

}  // namespace qkv
