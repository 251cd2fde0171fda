// SQuAD's format and what is computed without a model (data/squad.h): the
// reader's checks, the windows of a long context, the span search against a
// brute force over every pair, and the metrics against worked examples
// (the official evaluate-v1.1.py's normalisation by hand).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "data/bpe.h"
#include "data/squad.h"
#include "errors.h"
#include "test_seed.h"
#include "trainer/qa_data.h"
#include "trainer/token_kinds.h"

using namespace qkv;
using namespace qkv::data;

namespace {

std::string squad_json(const std::string& context, const std::string& qas) {
  return R"({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": )" + context +
         R"(, "qas": [)" + qas + "]}]}]}";
}

}  // namespace

TEST_CASE("parse_squad reads v1.1 and turns character answer_starts into byte offsets") {
  // "é" is two bytes: the answer "café" starts at character 4, byte 4, and
  // "ok" at character 10, byte 11.
  const SquadFile f = parse_squad(
      squad_json(
          R"("the café ok")",
          R"({"id": "q1", "question": "Where?", "answers": [{"text": "café", "answer_start": 4}]},
                    {"id": "q2", "question": "How?", "answers": [{"text": "ok", "answer_start": 9}]})"),
      "dev.json");
  REQUIRE(f.paragraphs.size() == 1);
  REQUIRE(f.questions == 2);
  CHECK_FALSE(f.v2);
  CHECK(f.paragraphs[0].questions[0].answers[0].start == 4);
  CHECK(f.paragraphs[0].questions[1].answers[0].start == 10);
}

TEST_CASE("parse_squad refuses a mismatched answer, duplicates, empties, naming the question") {
  CHECK_THROWS_WITH(
      parse_squad(
          squad_json(
              R"("abc def")",
              R"({"id": "q7", "question": "x", "answers": [{"text": "def", "answer_start": 3}]})"),
          "dev.json"),
      doctest::Contains(
          "dev.json: question 'q7': answer_start 3 does not point at its text 'def'"));
  CHECK_THROWS_WITH(
      parse_squad(
          squad_json(
              R"("abc")",
              R"({"id": "a", "question": "x", "answers": [{"text": "abc", "answer_start": 0}]},
                                            {"id": "a", "question": "y", "answers": [{"text": "abc", "answer_start": 0}]})"),
          "d.json"),
      doctest::Contains("question 'a': the id is used twice"));
  CHECK_THROWS_WITH(
      parse_squad(squad_json(R"("  ")", R"({"id": "e", "question": "x", "answers": []})"),
                  "d.json"),
      doctest::Contains("question 'e': its context is empty"));
  CHECK_THROWS_WITH(
      parse_squad(squad_json(R"("abc")", R"({"id": "n", "question": "x", "answers": []})"),
                  "d.json"),
      doctest::Contains("question 'n': no answers"));
  CHECK_THROWS_WITH(parse_squad("{\"data\": []}", "d.json"),
                    doctest::Contains("d.json: no questions"));
  CHECK_THROWS_WITH(parse_squad("{\"data\": [}", "d.json"),
                    doctest::Contains("d.json is not valid JSON"));
  CHECK_THROWS_WITH(parse_squad(std::string("{\"data\": \"\xff\"}"), "d.json"),
                    doctest::Contains("d.json is not valid JSON"));
}

TEST_CASE("parse_squad reads v2's is_impossible: the gold answer is none") {
  const SquadFile f = parse_squad(
      squad_json(R"("abc")",
                 R"({"id": "i", "question": "x", "is_impossible": true, "answers": []})"),
      "v2.json");
  CHECK(f.v2);
  CHECK(f.paragraphs[0].questions[0].impossible);
  CHECK(f.paragraphs[0].questions[0].answers.empty());
}

TEST_CASE(
    "qa_windows cuts a long context with overlapping windows; the answer in the window that holds "
    "it") {
  // question 2 tokens, context 10 tokens (ids 100..109), window 10: room for
  // 10 - 2 - 3 = 5 context tokens, stride 2: windows start at 0, 3, 6 (the
  // last holds 6..9 and ends the context).
  const Seq q = {50, 51};
  Seq c;
  for (int64_t i = 0; i < 10; ++i) c.push_back(100 + i);
  const auto w = qa_windows(q, c, 10, 2, /*answer*/ 4, 5, /*cls*/ 1, /*sep*/ 2);
  REQUIRE(w.size() == 3);
  CHECK(w[0].context_first == 0);
  CHECK(w[1].context_first == 3);
  CHECK(w[2].context_first == 6);
  CHECK(w[0].ids == Seq{1, 50, 51, 2, 100, 101, 102, 103, 104, 2});
  CHECK(w[0].allowed == std::vector<uint8_t>{1, 0, 0, 0, 1, 1, 1, 1, 1, 0});
  // The answer (context tokens 4..5) is whole in window 1 only (3..7); window 0
  // (0..4) holds token 4 alone and points at [CLS]; window 2 (6..9) neither.
  CHECK((w[0].start == 0 && w[0].end == 0));
  CHECK((w[1].start == 4 + 4 - 3 && w[1].end == 4 + 5 - 3));
  CHECK(w[1].ids[static_cast<size_t>(w[1].start)] == 104);
  CHECK((w[2].start == 0 && w[2].end == 0));
  CHECK(w[2].ids.size() == 2 + 2 + 4 + 1);
  CHECK_THROWS_WITH(qa_windows(q, c, 5, 0, -1, -1, 1, 2), doctest::Contains("leaves no room"));
  CHECK_THROWS_WITH(qa_windows(q, c, 10, 5, -1, -1, 1, 2),
                    doctest::Contains("--doc-stride 5 is not below the 5 context tokens"));
}

TEST_CASE("best_span equals a brute force over every (start, end) pair") {
  Generator g = testing::test_generator();
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t T = 3 + trial % 17, L = 1 + trial % 5;
    Tensor s = Tensor::normal({T}, 0, 1, g), e = Tensor::normal({T}, 0, 1, g);
    Tensor coin = Tensor::uniform({T}, 0, 1, g);
    std::vector<uint8_t> allowed(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      allowed[static_cast<size_t>(t)] = t == 0 || coin.data()[t] < 0.7;
    const Span got = best_span(s.data(), e.data(), allowed, L);
    double want = -std::numeric_limits<double>::infinity();
    int64_t ws = 0, we = 0;
    for (int64_t a = 1; a < T; ++a)
      for (int64_t b = 1; b < T; ++b)
        if (allowed[static_cast<size_t>(a)] && allowed[static_cast<size_t>(b)] && a <= b &&
            b - a<L&& double(s.data()[a]) + double(e.data()[b])> want) {
          want = double(s.data()[a]) + double(e.data()[b]);
          ws = a;
          we = b;
        }
    CHECK(got.score == want);
    if (std::isfinite(want)) CHECK((got.start == ws && got.end == we));
  }
}

TEST_CASE("tokens_of_bytes finds the tokens an answer's bytes overlap") {
  const std::vector<ByteSpan> spans = {{0, 3}, {3, 4}, {4, 9}, {10, 12}};
  CHECK(tokens_of_bytes(spans, 4, 9) == std::pair<int64_t, int64_t>{2, 2});
  CHECK(tokens_of_bytes(spans, 1, 11) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(tokens_of_bytes(spans, 9, 10) == std::pair<int64_t, int64_t>{-1, -1});
}

TEST_CASE("SQuAD's normalisation and metrics on worked examples") {
  CHECK(squad_normalize("The  Cat's, hat!") == "cats hat");
  CHECK(squad_normalize("an Apple a day") == "apple day");
  CHECK(squad_exact("the Eiffel Tower.", {"Eiffel Tower", "Paris"}) == 1.0);
  CHECK(squad_exact("Eiffel", {"Eiffel Tower"}) == 0.0);
  // prediction "eiffel tower in paris" (4 words) against gold "eiffel tower"
  // (2): 2 in common, precision 2/4, recall 2/2, F1 = 2 * 0.5 * 1 / 1.5 = 2/3.
  CHECK(squad_f1("The Eiffel Tower in Paris", {"Eiffel Tower"}) == doctest::Approx(2.0 / 3.0));
  // the best over the golds: "paris" against {"eiffel tower", "paris france"}:
  // 0, and 1 in common of 1 and 2 words: 2 * 1 * 0.5 / 1.5 = 2/3.
  CHECK(squad_f1("Paris", {"Eiffel Tower", "Paris, France"}) == doctest::Approx(2.0 / 3.0));
  // repeated words count once per occurrence: "a a b" vs "a b b" -> after
  // articles go: "b" vs "b b": 1 in common, P 1, R 1/2, F1 2/3.
  CHECK(squad_f1("a a b", {"a b b"}) == doctest::Approx(2.0 / 3.0));
  CHECK(squad_f1("", {}) == 1.0);  // v2: nothing predicted for an impossible question
  CHECK(squad_f1("x", {}) == 0.0);
}

TEST_CASE("every token kind says where each of its tokens is in the text, in bytes") {
  const std::string text = "Le café  ouvre\tà 8 h.\nFin";
  for (const train::TokenKind& k : train::token_kinds()) {
    INFO(std::string(k.name));
    REQUIRE(bool(k.spans));
    data::Vocab v = k.learned ? data::Vocab::from_bpe(data::BPE::train(text + text, 262))
                              : data::Vocab::from_tokens(data::split_tokens(text, k.split));
    const Seq ids = k.encode(v, text, nullptr);
    const std::vector<ByteSpan> spans = k.spans(v, text, ids);
    REQUIRE(spans.size() == ids.size());
    int64_t at = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      CHECK(spans[i].begin >= at);  // in order, not overlapping
      CHECK(spans[i].end > spans[i].begin);
      const std::string piece = text.substr(static_cast<size_t>(spans[i].begin),
                                            static_cast<size_t>(spans[i].end - spans[i].begin));
      // each span's bytes are that token (white space between words skipped)
      CHECK(k.decode(v, Seq{ids[i]}) == piece);
      at = spans[i].end;
    }
  }
}

TEST_CASE("SQuAD v2's no-answer threshold: the one of best mean F1, swept over the differences") {
  // null - span score differences -2, 1, 3; the spans' F1 1, 0, 1; "no
  // answer"'s 0, 1, 0. All "no answer": 1/3; answering the first: 2/3;
  // the first two: 1/3; all three: 2/3 (not better). Best: threshold -2.
  const train::QaNullChoice c = train::best_null_threshold({1, -2, 3}, {0, 1, 1}, {1, 0, 0});
  CHECK(c.threshold == -2);
  CHECK(c.f1 == doctest::Approx(2.0 / 3.0));
  // Every question impossible and every span wrong: "no answer" always.
  const train::QaNullChoice none = train::best_null_threshold({0.5, 0.2}, {0, 0}, {1, 1});
  CHECK(none.f1 == 1.0);
  CHECK(none.threshold < 0.2);
}
