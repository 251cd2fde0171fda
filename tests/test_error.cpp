// qkv::brief (core/error.h): the one rule by which every message quotes text
// that came from a file or from the user: about 60 bytes, then an ellipsis
// and the length; control bytes and what is not UTF-8 as \xNN.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"

using qkv::brief;

namespace {
// True when `s` holds no byte below 0x20, no DEL and no C1 control.
bool printable(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xa0) return false;
  }
  return true;
}
// True when `s` is well-formed UTF-8 throughout.
bool utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = qkv::utf8_char_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}
}  // namespace

TEST_CASE("brief: a short printable value is quoted as it is") {
  CHECK(brief("model.src_embed.weight") == "model.src_embed.weight");
  CHECK(brief("") == "");
  CHECK(brief("größe ✓ 𝄞") == "größe ✓ 𝄞");  // UTF-8 text of 2, 3 and 4 bytes is not escaped
}

TEST_CASE("brief: every control byte shows as \\xNN, never raw (ESC, NUL, newline, tab, DEL, C1)") {
  CHECK(brief("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(brief(std::string("x\0y", 3)) == "x\\x00y");  // a NUL does not end the quote
  CHECK(brief("a\nb\tc\rd") == "a\\x0ab\\x09c\\x0dd");
  CHECK(brief("del\x7f") == "del\\x7f");
  CHECK(brief("csi\xc2\x9b"
              "2J") == "csi\\xc2\\x9b2J");  // U+009B, a terminal's one-byte CSI
  for (int c = 0; c < 0x20; ++c) CHECK(printable(brief(std::string(1, char(c)) + "x")));
}

TEST_CASE("brief: bytes that are not UTF-8 show as \\xNN") {
  CHECK(brief("a\xff"
              "b") == "a\\xffb");
  CHECK(brief("\x80") == "\\x80");                    // a stray continuation byte
  CHECK(brief("cut \xe2\x9c") == "cut \\xe2\\x9c");   // a 3-byte character missing its last byte
  CHECK(brief("\xf0\x9d\x84") == "\\xf0\\x9d\\x84");  // a 4-byte one missing its last
  CHECK(brief("\xc0\xaf") == "\\xc0\\xaf");           // an overlong '/'
  CHECK(brief("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");  // another overlong '/'
  CHECK(brief("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  CHECK(brief("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(utf8(brief("\xe2\x9c\xe2\x9c\x93\xff")));
}

TEST_CASE("brief: a long value is cut after about 60 bytes and says how long it was") {
  CHECK(qkv::kBriefBytes == 60);
  const std::string big(100 * 1024, 'x');
  CHECK(brief(big) == std::string(60, 'x') + "... (102400 bytes)");
  // A value of exactly the limit is whole; one byte more is cut.
  CHECK(brief(std::string(60, 'y')) == std::string(60, 'y'));
  CHECK(brief(std::string(61, 'y')) == std::string(60, 'y') + "... (61 bytes)");
  // Escapes count toward the limit: 100 KB of ESC is still one short line.
  const std::string esc = brief(std::string(100 * 1024, '\x1b'));
  CHECK(esc.size() < 90);
  CHECK(printable(esc));
  CHECK(esc.find("... (102400 bytes)") != std::string::npos);
}

TEST_CASE("brief: a cut never splits a UTF-8 character") {
  // 59 ASCII bytes, then 3-byte characters: the one that starts at 59 is kept whole.
  const std::string text = std::string(59, 'a') + "✓✓✓";
  CHECK(brief(text) == std::string(59, 'a') + "✓... (68 bytes)");
  for (size_t lead = 55; lead < 62; ++lead) {  // every cut position against 2-, 3-, 4-byte ones
    for (const char* ch : {"é", "✓", "𝄞"}) {
      std::string s(lead, 'a');
      for (int k = 0; k < 10; ++k) s += ch;
      const std::string b = brief(s);
      CAPTURE(b);
      CHECK(utf8(b));
      CHECK(b.size() < 60 + 4 + 20);
    }
  }
}
