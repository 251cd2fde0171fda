// A language model's held-out bits per byte (Trainer::evaluate, TextData::
// scored_heldout_bytes): total nats / ln 2 / the bytes of held-out text the
// scored tokens cover, for character, word and BPE tokens; and the BPE run's
// held-out part, cut in bytes before the tokenizer learns anything.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "errors.h"
#include "test_seed.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"
#include "temp_dir.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::has;
using qkv::testing::write_file;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("qkv_bpb_" + std::to_string(getpid()) + "_" + name))
      .string();
}
train::TrainConfig lm_config(const std::string& data, const std::string& tokens) {
  train::TrainConfig c;
  c.model = "gpt";
  c.format = "text";
  c.data = data;
  c.tokens = tokens;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.context = 8;
  c.batch = 4;
  c.positions = "learned";
  c.pre_ln = true;
  c.tie = true;
  c.seed = testing::test_seed();
  return c;
}
// Some English with a few bytes outside ASCII (and, for BPE, outside UTF-8).
std::string prose(bool invalid_bytes) {
  std::string s;
  for (int i = 0; i < 60; ++i)
    s += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) +
         (i % 5 == 0 ? " caf\xC3\xA9" : "") + (invalid_bytes && i % 9 == 0 ? "\xFF\xFE" : "") +
         ".\n";
  return s;
}
}  // namespace

TEST_CASE("bits per byte: character tokens on ASCII text give exactly loss / ln 2") {
  const std::string f = temp_path("ascii.txt");
  std::string text;
  for (int i = 0; i < 80; ++i) text += "the cat sat on the mat " + std::to_string(i % 10) + ". ";
  write_file(f, text);
  train::Trainer t(lm_config(f, "char"));
  t.step();
  const train::EvalResult r = t.evaluate();
  REQUIRE(r.tokens > 0);
  CHECK(r.bytes == r.tokens);  // one byte a character
  CHECK(r.bits_per_byte == r.loss / std::log(2.0));
  std::remove(f.c_str());
}

TEST_CASE("bits per byte: a character or word counts its bytes (a word its spaces before it)") {
  const std::string f = temp_path("words.txt");
  write_file(f, prose(false));
  for (const char* tokens : {"char", "word"}) {
    train::Trainer t(lm_config(f, tokens));
    const train::EvalResult r = t.evaluate();
    // The scored tokens are 1 .. n*T of the held-out stream; the text they
    // cover runs from the end of token 0 to the end of token n*T.
    const data::Seq& held = t.text->heldout_tokens();
    const int64_t T = t.cfg.context, n = (static_cast<int64_t>(held.size()) - 1) / T;
    REQUIRE(r.tokens == n * T);
    // Where each held-out token ends in the file (the held-out part is its last tokens).
    const std::string all = prose(false);
    std::vector<size_t> ends;
    size_t at = 0;
    data::for_each_token(all, train::token_kind(tokens, "--tokens").split, [&](std::string_view s) {
      at = static_cast<size_t>(s.data() - all.data()) + s.size();
      ends.push_back(at);
    });
    const size_t first = ends.size() - held.size();
    INFO(tokens);
    CHECK(r.bytes == static_cast<int64_t>(ends[first + static_cast<size_t>(n * T)] - ends[first]));
    CHECK(r.bits_per_byte * std::log(2.0) * double(r.bytes) ==
          doctest::Approx(r.loss * double(r.tokens)).epsilon(1e-12));
  }
  std::remove(f.c_str());
}

TEST_CASE(
    "bits per byte: BPE tokens cover their bytes; the tokenizer never saw the held-out bytes") {
  const std::string f = temp_path("bpe.txt");
  const std::string text = prose(true);
  write_file(f, text);
  train::TrainConfig c = lm_config(f, "bpe");
  c.bpe_vocab = 280;
  train::Trainer t(c);
  REQUIRE(t.vocab.bpe() != nullptr);
  CHECK(t.vocab.size() == 3 + 280);
  CHECK(t.tokenizer_info.learned);
  // The held-out part is the last 10% of the bytes; the merges are those
  // learned from the rest alone, and the two parts decode to the file.
  const size_t cut = train::detail::heldout_byte_cut(text, c.valid_fraction);
  CHECK(cut == text.size() - static_cast<size_t>(0.1 * double(text.size())));
  CHECK(data::BPE::train(text.substr(0, cut), 280).merges() == t.vocab.bpe()->merges());
  CHECK(t.vocab.decode_bytes(t.text->train_tokens()) == text.substr(0, cut));
  CHECK(t.vocab.decode_bytes(t.text->heldout_tokens()) == text.substr(cut));
  const train::EvalResult r = t.evaluate();
  const data::Seq& held = t.text->heldout_tokens();
  int64_t bytes = 0;
  for (int64_t i = 1; i <= r.tokens; ++i) bytes += t.vocab.byte_count(held[static_cast<size_t>(i)]);
  CHECK(r.bytes == bytes);
  CHECK(r.bytes > r.tokens);  // merged tokens hold more than a byte
  CHECK(r.bits_per_byte * std::log(2.0) * double(r.bytes) ==
        doctest::Approx(r.loss * double(r.tokens)).epsilon(1e-12));
  std::remove(f.c_str());
}

TEST_CASE("the held-out byte cut never falls inside a UTF-8 character") {
  const std::string s = "ab\xE2\x82\xAC";  // "ab€": the last 20% would start inside the euro
  CHECK(train::detail::heldout_byte_cut(s, 0.2) == 2);
  CHECK(train::detail::heldout_byte_cut("abcdefghij", 0.1) == 9);
  const std::string bad(10, '\x80');  // no lead byte to go back to: at most 3 steps
  CHECK(train::detail::heldout_byte_cut(bad, 0.1) == 6);
}

TEST_CASE("--tokens bpe and --bpe-vocab: each bad setting is one line naming the flag") {
  const std::string f = temp_path("bad.txt");
  write_file(f, prose(false));
  auto refused = [&](auto set, const char* want) {
    train::TrainConfig c = lm_config(f, "bpe");
    c.bpe_vocab = 280;
    set(c);
    const std::string m = error_of([&] { train::Trainer{c}; });
    INFO(m);
    CHECK(has(m, want));
    CHECK(m.find('\n') == std::string::npos);
  };
  refused([](auto& c) { c.bpe_vocab = 255; }, "--bpe-vocab: must be in [256, 1048576]");
  refused([](auto& c) { c.bpe_vocab = 0; }, "--bpe-vocab: --tokens bpe needs the tokenizer's size");
  refused([](auto& c) { c.bpe_vocab = 100000; },
          "--bpe-vocab 100000: " /* then the file and the BPE's own limit */);
  refused([](auto& c) { c.bpe_vocab = 100000; }, "is more than this text allows");
  refused([](auto& c) { c.tokens = "char"; }, "--bpe-vocab: goes with --tokens bpe");
  refused(
      [](auto& c) {
        c.data = "";
        c.format = "text";
      },
      "--tokens: bpe is learned from the text of --data FILE");
  std::remove(f.c_str());
}
