// The byte-level BPE tokenizer (data/bpe.h): the pre-split, training as
// minbpe trains, and the property that matters most: decode(encode(x)) == x
// for any bytes, on random bytes (every value, invalid UTF-8) and on a real
// text (the GPL-3 that Debian's base-files ships on every machine).
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/generator.h"
#include "data/bpe.h"
#include "data/loaders.h"
#include "data/vocab.h"
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
  CHECK(has(error_of([] { data::BPE::from_merges({}, R"(\C+)"); }), "\\C is disabled"));
  const data::BPE bpe = data::BPE::from_merges({});
  CHECK(has(error_of([&] { bpe.decode({256}); }), "token 256 is out of range [0, 256)"));
}

namespace {
// GPT-2's bytes_to_unicode as its encoder.py builds it: the printable bytes
// keep their number, the others take 256, 257, ... in byte order.
std::vector<unsigned> gpt2_bytes_to_unicode() {
  std::vector<unsigned> cp(256, 0);
  std::vector<bool> kept(256, false);
  for (unsigned b = '!'; b <= '~'; ++b) kept[b] = true;
  for (unsigned b = 0xA1; b <= 0xAC; ++b) kept[b] = true;
  for (unsigned b = 0xAE; b <= 0xFF; ++b) kept[b] = true;
  unsigned n = 0;
  for (unsigned b = 0; b < 256; ++b) cp[b] = kept[b] ? b : 256 + n++;
  return cp;
}
std::string utf8_of(unsigned cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}
}  // namespace

TEST_CASE("bpe visible: every byte is GPT-2's bytes_to_unicode character, one per byte") {
  const std::vector<unsigned> cp = gpt2_bytes_to_unicode();
  std::string all, want;
  for (unsigned b = 0; b < 256; ++b) {
    CHECK(data::BPE::visible(std::string(1, static_cast<char>(b))) == utf8_of(cp[b]));
    all += static_cast<char>(b);
    want += utf8_of(cp[b]);
  }
  CHECK(data::BPE::visible(all) == want);
  CHECK(data::first_invalid_utf8(want) == std::string::npos);    // JSON can hold it
  CHECK(data::BPE::visible(" the\n") == "\xC4\xA0the\xC4\x8A");  // "Ġthe" "Ċ"
}

TEST_CASE("a BPE vocabulary encodes and decodes any bytes exactly, its ids after the specials") {
  Generator g = testing::test_generator();
  const data::Vocab v = data::Vocab::from_bpe(data::BPE::train(gpl3(), 256 + 200));
  REQUIRE(v.bpe() != nullptr);
  CHECK(v.first_bpe_id() == 3);
  CHECK(v.size() == 3 + 256 + 200);
  CHECK(!v.has_unk());
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (int k = 0; k < 40; ++k) {
    const std::string s = (k == 0 ? all : "") + random_bytes(g, g.next_u64() % 300);
    const data::Seq ids = v.encode_bytes(s);
    for (int64_t id : ids) REQUIRE((id >= 3 && id < v.size()));  // never a special token
    REQUIRE(v.decode_bytes(ids) == s);
    int64_t bytes = 0;
    for (int64_t id : ids) bytes += v.byte_count(id);
    CHECK(bytes == static_cast<int64_t>(s.size()));
  }
  // Ids are the BPE's own, shifted by the 3 specials.
  const std::vector<int32_t> raw = v.bpe()->encode("the license");
  const data::Seq ids = v.encode_bytes("the license");
  REQUIRE(ids.size() == raw.size());
  for (size_t i = 0; i < ids.size(); ++i) CHECK(ids[i] == raw[i] + 3);
  CHECK(v.decode_bytes({data::kEos}) == "</s>");
  CHECK(v.byte_count(data::kEos) == 0);
  // More special tokens (BERT's, T5's sentinels) push the BPE's ids up.
  const data::Vocab m =
      data::Vocab::from_bpe(data::BPE::from_merges(v.bpe()->merges()), {"[CLS]", "[MASK]"});
  CHECK(m.first_bpe_id() == 5);
  CHECK(m.text(4) == "[MASK]");
  CHECK(m.decode_bytes(m.encode_bytes(all)) == all);
}

TEST_CASE(
    "a BPE vocabulary reads back from its JSON, and a list that is not its merges' is refused") {
  const data::Vocab v = data::Vocab::from_bpe(data::BPE::train(gpl3(), 256 + 50), {"[SEP]"});
  const nlohmann::json list = v.to_json(), bpe = v.bpe_json();
  CHECK(list[3] == "[SEP]");
  CHECK(list[4 + ' '] == "\xC4\xA0");  // the space byte in GPT-2's mapping
  const data::Vocab back = data::Vocab::from_json(list, &bpe);
  REQUIRE(back.bpe() != nullptr);
  CHECK(back.bpe()->merges() == v.bpe()->merges());
  CHECK(back.first_bpe_id() == 4);
  CHECK(back.to_json() == list);
  nlohmann::json wrong = list;
  wrong[4 + 'a'] = "b";
  CHECK(has(error_of([&] { data::Vocab::from_json(wrong, &bpe); }),
            "vocab: entry 101 is 'b' but BPE token 97 of 'bpe' is 'a'"));
  // A list a token short (or a merge short) is told as a count, not as a wrong entry.
  nlohmann::json short_list(list.begin(), list.end() - 1);
  CHECK(has(error_of([&] { data::Vocab::from_json(short_list, &bpe); }),
            "vocab: lists 49 merged tokens after the 256 byte tokens (entries 4..) but 'bpe' has "
            "50 merges (1 fewer in the list)"));
  nlohmann::json merge_short = bpe;
  merge_short["merges"].erase(merge_short["merges"].end() - 1);
  CHECK(has(error_of([&] { data::Vocab::from_json(list, &merge_short); }),
            "but 'bpe' has 49 merges (1 more in the list)"));
  nlohmann::json bad = bpe;
  bad["merges"][0] = {1};
  CHECK(has(error_of([&] { data::Vocab::from_json(list, &bad); }),
            "bpe: merge 0 is [1], not a pair [a, b] of token ids"));
}

TEST_CASE("utf8_or_replacement shows each byte outside well-formed UTF-8 as U+FFFD") {
  CHECK(data::utf8_or_replacement("ok \xC3\xA9") == "ok \xC3\xA9");
  CHECK(data::utf8_or_replacement("a\xFF\xFE"
                                  "b") ==
        "a\xEF\xBF\xBD\xEF\xBF\xBD"
        "b");
  CHECK(data::utf8_or_replacement("\xC3") == "\xEF\xBF\xBD");  // a character cut short
}

TEST_CASE("bpe refuses merges whose tokens would outgrow memory, before spelling any out") {
  // Each merge doubles the last token: 2^60 bytes by the end, were they expanded.
  std::vector<std::pair<int32_t, int32_t>> doubling{{'a', 'a'}};
  for (int32_t k = 1; k < 60; ++k) doubling.emplace_back(255 + k, 255 + k);
  const std::string msg = error_of([&] { data::BPE::from_merges(doubling); });
  CHECK(has(msg, "BPE: merge 20 (275, 275) makes a token of more than 1048576 bytes"));
  // Many tokens each within the bound, too many bytes together.
  // 19 doublings make a token of 2^19 bytes (id 274); each merge after adds
  // one byte to the last token, so 600 tokens of about 512 KiB follow.
  std::vector<std::pair<int32_t, int32_t>> wide{{'a', 'a'}};
  for (int32_t k = 1; k < 19; ++k) wide.emplace_back(255 + k, 255 + k);
  for (int32_t id = 274; id < 274 + 600; ++id) wide.emplace_back(id, 'a');
  CHECK(has(error_of([&] { data::BPE::from_merges(wide); }), "more than 268435456"));
}

TEST_CASE("bpe pre-split without PCRE2's JIT gives the JIT's chunks on any bytes") {
  // (*NO_JIT) runs the interpreter, the path a machine without executable
  // memory takes. Its chunks must be the JIT's on any bytes.
  const data::BPE jit = data::BPE::from_merges({});
  const data::BPE interp =
      data::BPE::from_merges({}, std::string("(*NO_JIT)") + data::BPE::kGPT4Pattern);
  Generator g(7);
  const std::string text = gpl3();
  CHECK(interp.split(text) == jit.split(text));
  for (size_t n : {1, 2, 3, 17, 300, 5000}) {
    const std::string bytes = random_bytes(g, n);
    CAPTURE(n);
    CHECK(interp.split(bytes) == jit.split(bytes));
    // text with invalid bytes among valid words, and a character cut at the end
    const std::string mixed = text.substr(0, n) + bytes.substr(0, n / 2) + "\xC3";
    CHECK(interp.split(mixed) == jit.split(mixed));
  }
  // Four copies of the GPL (140 KB, 28,660 chunks). Not timed here: split
  // alone took 1.15 s before (the interpreter re-checked the rest of the
  // text at every chunk, quadratic), 0.009 s now; 562 KB, 19.7 s and 0.035 s.
  std::string big;
  for (int i = 0; i < 4; ++i) big += text;
  CHECK(interp.split(big).size() == jit.split(big).size());
}
