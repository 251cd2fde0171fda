// The byte-level BPE tokenizer (data/bpe.h): the pre-split, training as
// minbpe trains, and the property that matters most: decode(encode(x)) == x
// for any bytes, on random bytes (every value, invalid UTF-8) and on a real
// text (the GPL-3 that Debian's base-files ships on every machine).
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/generator.h"
#include "data/bpe.h"
#include "errors.h"
#include "test_seed.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::has;

namespace {
std::string gpl3() {
  std::ifstream in("/usr/share/common-licenses/GPL-3", std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
std::string random_bytes(Generator& g, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(g.next_u64() & 0xff);
  return s;
}
}  // namespace

TEST_CASE("bpe pre-split: GPT-4's pattern cuts words, numbers of 3 digits, spaces, punctuation") {
  const data::BPE bpe = data::BPE::from_merges({});
  // Punctuation keeps the newlines after it; a run of spaces leaves its last
  // one to the word that follows.
  const std::vector<std::string> want{"Hello", " world", "'s", " ", "123",
                                      "456",   "!!\n\n", "  ", " x"};
  CHECK(bpe.split("Hello world's 123456!!\n\n   x") == want);
  // Invalid UTF-8 is kept, as chunks of its own: the chunks add up to the text.
  const std::string bad = "ab\xff\xfe cd\xc3";
  std::string joined;
  for (const std::string& c : bpe.split(bad)) joined += c;
  CHECK(joined == bad);
}

TEST_CASE(
    "bpe training as minbpe: 'aaabdaaabac' with 3 merges encodes to [258, 100, 258, 97, 99]") {
  const data::BPE bpe = data::BPE::train("aaabdaaabac", 256 + 3);
  CHECK(bpe.vocab_size() == 259);
  CHECK(bpe.encode("aaabdaaabac") == std::vector<int32_t>{258, 100, 258, 97, 99});
  CHECK(bpe.merges().front() == std::pair<int32_t, int32_t>{'a', 'a'});  // the most frequent pair
  CHECK(bpe.decode({258, 100, 258, 97, 99}) == "aaabdaaabac");
  CHECK(bpe.token_bytes(258) == "aaab");
}

TEST_CASE("bpe encode then decode gives back any bytes: every byte value and random bytes") {
  Generator g = testing::test_generator();
  const data::BPE bpe = data::BPE::train(gpl3(), 256 + 300);
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  CHECK(bpe.decode(bpe.encode(all)) == all);
  for (int k = 0; k < 50; ++k) {
    const std::string s = random_bytes(g, 1 + g.next_u64() % 400);
    REQUIRE(bpe.decode(bpe.encode(s)) == s);
  }
  CHECK(bpe.encode("").empty());
}

TEST_CASE("bpe on a real text: exact round trip, fewer tokens than bytes, merges reload the same") {
  const std::string text = gpl3();
  REQUIRE(text.size() > 30000);
  const data::BPE bpe = data::BPE::train(text, 256 + 500);
  const std::vector<int32_t> ids = bpe.encode(text);
  CHECK(bpe.decode(ids) == text);
  // English prose with 500 merges: about 2.9 bytes a token (measured: 35,148
  // bytes in 12,201 tokens); bytes alone would be 1.
  CHECK(ids.size() * 5 < text.size() * 2);
  // A tokenizer rebuilt from the saved merges encodes the same.
  const data::BPE again = data::BPE::from_merges(bpe.merges(), bpe.pattern());
  CHECK(again.encode(text) == ids);
  // Training is deterministic.
  CHECK(data::BPE::train(text, 256 + 500).merges() == bpe.merges());
}

TEST_CASE("bpe encodes a long run of one byte (one chunk) without quadratic time, exactly") {
  const data::BPE bpe = data::BPE::train(std::string(5000, ' ') + "a b c a b c", 256 + 8);
  const std::string run(1 << 18, ' ');  // 256 KB of spaces: one chunk to the pattern (n^2 = 7e10)
  const std::vector<int32_t> ids = bpe.encode(run);
  CHECK(ids.size() < run.size() / 100);
  CHECK(bpe.decode(ids) == run);
}

TEST_CASE("bpe refuses a vocabulary below 256, one the text cannot fill, and bad merges") {
  CHECK(has(error_of([] { data::BPE::train("abc", 255); }), "vocab_size 255 is below 256"));
  const std::string msg = error_of([] { data::BPE::train("abab", 256 + 5); });
  CHECK(has(msg, "vocab_size 261 is more than this text allows"));
  CHECK(has(msg, "the largest vocabulary is 257"));
  CHECK(has(error_of([] {
              data::BPE::from_merges({{97, 300}});
            }),
            "merge 0 (97, 300) names a token not made before token 256"));
  CHECK(has(error_of([] { data::BPE::from_merges({{97, 98}, {97, 98}}); }), "repeats"));
  CHECK(has(error_of([] { data::BPE::from_merges({}, "(unclosed"); }), "does not compile"));
  const data::BPE bpe = data::BPE::from_merges({});
  CHECK(has(error_of([&] { bpe.decode({256}); }), "token 256 is out of range [0, 256)"));
}
