// qkv::brief (core/error.h): how an error message quotes a value that came
// from a file or from the user.
#include <doctest/doctest.h>

#include <string>

#include "core/error.h"

using qkv::brief;

TEST_CASE("brief: a short printable value is quoted as it is") {
  CHECK(brief("model.src_embed.weight") == "model.src_embed.weight");
  CHECK(brief("") == "");
  CHECK(brief("größe ✓") == "größe ✓");  // UTF-8 text is not escaped
}

TEST_CASE("brief: control characters show escaped, never raw") {
  CHECK(brief("a\nb") == "a\\nb");
  CHECK(brief("a\tb\rc") == "a\\tb\\rc");
  CHECK(brief(std::string("x\0y", 3)) == "x\\x00y");
  CHECK(brief("\x1b[31mred") == "\\x1b[31mred");
  CHECK(brief("del\x7f") == "del\\x7f");
}

TEST_CASE("brief: bytes that are not UTF-8 show escaped") {
  CHECK(brief("a\xff"
              "b") == "a\\xffb");
  CHECK(brief("\x80") == "\\x80");                   // a stray continuation byte
  CHECK(brief("cut \xe2\x9c") == "cut \\xe2\\x9c");  // a 3-byte character missing its last byte
}

TEST_CASE("brief: a 1 MB value is cut to about 200 characters and says how long it was") {
  const std::string big(1 << 20, 'x');
  const std::string b = brief(big);
  CHECK(b == std::string(200, 'x') + "... (1048576 bytes)");
  // A value of exactly the limit is whole; one byte more is cut.
  CHECK(brief(std::string(200, 'y')) == std::string(200, 'y'));
  CHECK(brief(std::string(201, 'y')) == std::string(200, 'y') + "... (201 bytes)");
  // Escapes count toward the limit: 1 MB of newlines is still one short line.
  const std::string nl = brief(std::string(1 << 20, '\n'));
  CHECK(nl.size() < 230);
  CHECK(nl.find('\n') == std::string::npos);
}

TEST_CASE("brief: a cut never splits a UTF-8 character") {
  // 199 ASCII bytes, then 3-byte characters: the one that starts at 199 is kept whole.
  const std::string text = std::string(199, 'a') + "✓✓✓";
  const std::string b = brief(text);
  CHECK(b == std::string(199, 'a') + "✓... (208 bytes)");
}
