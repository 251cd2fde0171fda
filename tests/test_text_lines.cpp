// A text read one line a sequence (data::TextData::of_lines, the trainer's
// --line-by-line, bert's mlm default): a drawn or held-out batch holds whole
// lines, padded, never the end of one line and the start of the next; a line
// longer than a sequence is cut into pieces; the held-out part is whole lines.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loaders.h"
#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"
#include "trainer/trainer.h"

using namespace qkv;
using qkv::testing::check_error;

namespace {

// The rows of a line-mode batch, each cut to its length; the padding checked.
std::vector<data::Seq> rows_of(const data::LMBatch& b) {
  std::vector<data::Seq> out;
  REQUIRE(b.ids.lengths.size() == static_cast<size_t>(b.ids.batch));
  for (int64_t r = 0; r < b.ids.batch; ++r) {
    const int64_t n = b.ids.lengths[static_cast<size_t>(r)];
    const auto row = b.ids.ids.begin() + r * b.ids.len;
    out.emplace_back(row, row + n);
    for (int64_t k = n; k < b.ids.len; ++k) CHECK(row[k] == data::kPad);
  }
  CHECK(b.target_tokens == 0);
  return out;
}

}  // namespace

TEST_CASE("TextData::of_lines: drawn and held-out batches hold whole sequences, padded") {
  // Training sequences {4 5 6}, {7}, {8 9}; held-out {10 11}, {12}, {13 14 15}.
  const data::TextData d = data::TextData::of_lines({4, 5, 6, 7, 8, 9}, {0, 3, 4, 6},
                                                    {10, 11, 12, 13, 14, 15}, {0, 2, 3, 6}, 8);
  CHECK(d.by_lines());
  CHECK(d.train_sequences() == 3);
  CHECK(d.heldout_sequences() == 3);
  const std::set<data::Seq> train = {{4, 5, 6}, {7}, {8, 9}};
  Generator g = qkv::testing::test_generator();
  std::set<data::Seq> seen;
  for (int k = 0; k < 10; ++k)
    for (const data::Seq& row : rows_of(d.draw(4, g))) {
      CHECK(train.count(row) == 1);
      seen.insert(row);
    }
  CHECK(seen == train);
  const std::vector<data::LMBatch> held = d.heldout_batches(2);
  REQUIRE(held.size() == 2);
  CHECK(rows_of(held[0]) == std::vector<data::Seq>{{10, 11}, {12}});
  CHECK(held[0].ids.len == 2);
  CHECK(rows_of(held[1]) == std::vector<data::Seq>{{13, 14, 15}});
  CHECK(d.scored_heldout_bytes() == 0);
  check_error(
      [] {
        data::TextData::of_lines({4, 5}, {0, 1}, {6}, {0, 1}, 8);
      },
      {"TextData::of_lines", "training starts", "2 tokens"});
  check_error(
      [] {
        data::TextData::of_lines({4, 5}, {0, 2}, {6}, {0, 0, 1}, 8);
      },
      {"TextData::of_lines", "held-out starts"});
}

namespace {

train::TrainConfig bert_mlm(const std::string& file) {
  train::TrainConfig c;
  c.model = "bert";
  c.data = file;
  c.format = "text";
  c.objective = "mlm";
  c.tokens = "word";
  c.positions = "learned";
  c.activation = "gelu";
  c.line_by_line = true;
  c.context = 8;  // <s>, 6 words, </s>
  c.d_model = 16;
  c.heads = 2;
  c.layers = 1;
  c.d_ff = 32;
  c.batch = 16;
  c.steps = 10;
  c.warmup = 2;
  c.valid_fraction = 0.25;
  c.seed = qkv::testing::test_seed();
  return c;
}

}  // namespace

TEST_CASE(
    "bert --line-by-line: every training pair is one line as <s> line </s>, a long line cut into "
    "pieces of --context - 2 words; the held-out part is the file's last whole lines") {
  Generator g = qkv::testing::test_generator();
  qkv::testing::TempDir d;
  // 40 lines of 1..6 words "L<i>w<k>" (every word names its line), and one
  // of 9 words; a blank line, which is no sequence.
  std::vector<std::vector<std::string>> lines;
  std::string text;
  for (int i = 0; i < 41; ++i) {
    const int n = i == 7 ? 9 : static_cast<int>(g.randint(1, 7));
    lines.emplace_back();
    for (int k = 0; k < n; ++k)
      lines.back().push_back("L" + std::to_string(i) + "w" + std::to_string(k));
    for (int k = 0; k < n; ++k) text += (k ? " " : "") + lines.back()[static_cast<size_t>(k)];
    text += i == 20 ? "\n\n" : "\n";
  }
  const std::string file = d.file("lines.txt");
  std::ofstream(file) << text;
  train::Trainer t(bert_mlm(file));
  REQUIRE(t.text != nullptr);
  REQUIRE(t.text->by_lines());
  // Which line a token belongs to, from its word.
  auto line_of = [&](int64_t id) {
    const std::string w = t.vocab.text(id);
    return std::stoi(w.substr(1, w.find('w') - 1));
  };
  // The training part is lines 0 .. m-1, each whole (every word once); the
  // held-out part the rest, whole: their words, unseen in training, are <unk>.
  std::map<int, int64_t> words_of_line;
  for (int64_t id : t.text->train_tokens()) words_of_line[line_of(id)]++;
  const int m = static_cast<int>(words_of_line.size());
  REQUIRE(m > 20);
  REQUIRE(m < 41);
  CHECK(words_of_line.rbegin()->first == m - 1);
  for (const auto& [line, n] : words_of_line)
    CHECK(n == static_cast<int64_t>(lines[static_cast<size_t>(line)].size()));
  int64_t held_words = 0;
  for (int i = m; i < 41; ++i)
    held_words += static_cast<int64_t>(lines[static_cast<size_t>(i)].size());
  CHECK(static_cast<int64_t>(t.text->heldout_tokens().size()) == held_words);
  for (int64_t id : t.text->heldout_tokens()) CHECK(id == data::kUnk);
  CHECK(t.text->heldout_sequences() == 41 - m);  // every held-out line has at most 6 words
  std::set<int> train_lines;
  for (const auto& [line, n] : words_of_line) train_lines.insert(line);
  // Line 7's 9 words are two sequences (6 + 3); the others one each.
  CHECK(t.text->train_sequences() == static_cast<int64_t>(train_lines.size()) + 1);
  // The pairs bert makes from a drawn batch: "<s> piece </s>", one line's
  // words in order, masked; no pair mixes two lines.
  Generator draw = qkv::testing::test_generator(1);
  int pieces_of_7 = 0;
  for (int k = 0; k < 32; ++k) {  // 512 draws of ~31 sequences: line 7's among them
    const data::LMBatch b = t.text->draw(16, draw);
    const std::vector<data::Pair> made =
        t.family().objectives.text_pairs(t.cfg, t.shape, b, t.vocab, draw);
    REQUIRE(made.size() == 16);
    for (size_t r = 0; r < made.size(); ++r) {
      const data::Seq& src = made[r].src;
      const int64_t n = b.ids.lengths[r];
      REQUIRE(static_cast<int64_t>(src.size()) == n + 2);
      CHECK(src.front() == data::kBos);
      CHECK(src.back() == data::kEos);
      CHECK(n <= 6);
      // The unmasked tokens (and the targets at masked ones) are the row's.
      const int line = line_of(b.ids.ids[r * static_cast<size_t>(b.ids.len)]);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t id = b.ids.ids[r * static_cast<size_t>(b.ids.len) + static_cast<size_t>(j)];
        CHECK(line_of(id) == line);
        CHECK((src[static_cast<size_t>(j) + 1] == id ||
               made[r].tgt[static_cast<size_t>(j) + 1] == id));
      }
      pieces_of_7 += line == 7;
    }
  }
  CHECK(pieces_of_7 > 0);
  CHECK(std::isfinite(t.step()));
}

TEST_CASE("--line-by-line is refused for a model that reads windows or no corpus") {
  qkv::testing::TempDir d;
  const std::string file = d.file("t.txt");
  std::ofstream(file) << "one two three\nfour five six\n";
  train::TrainConfig c = bert_mlm(file);
  c.model = "gpt";
  c.objective = "";
  check_error([&] { train::Trainer t(c); }, {"--line-by-line", "the gpt model reads windows"});
  train::TrainConfig v;  // a task: no corpus
  v.line_by_line = true;
  check_error([&] { train::Trainer t(v); }, {"--line-by-line", "no corpus here (--format tsv)"});
}

TEST_CASE(
    "TextData::draw with a pool (--group-by-length): whole lines of like length, each line as "
    "often as without it, less padding") {
  // 60 training lines; line i holds 1 + (i * 7) % 20 tokens, all equal to i + 4.
  data::Seq train;
  std::vector<int64_t> starts{0};
  for (int64_t i = 0; i < 60; ++i) {
    for (int64_t k = 0; k < 1 + (i * 7) % 20; ++k) train.push_back(i + 4);
    starts.push_back(static_cast<int64_t>(train.size()));
  }
  const data::TextData d = data::TextData::of_lines(train, starts, {4}, {0, 1}, 32);
  const int64_t B = 6, pool = 8, draws = 4000;
  Generator g = qkv::testing::test_generator(2), h = qkv::testing::test_generator(2);
  std::vector<int64_t> seen(60, 0);
  double padded_grouped = 0, padded_any = 0;
  for (int64_t k = 0; k < draws; ++k) {
    const data::LMBatch b = d.draw(B, g, pool);
    const std::vector<data::Seq> rows = rows_of(b);
    REQUIRE(rows.size() == static_cast<size_t>(B));
    for (size_t r = 0; r < rows.size(); ++r) {
      const int64_t line = rows[r].front() - 4;
      REQUIRE(line >= 0);
      REQUIRE(line < 60);
      // A whole line, and the rows in order of length.
      CHECK(rows[r] == data::Seq(static_cast<size_t>(1 + (line * 7) % 20), line + 4));
      if (r > 0) CHECK(rows[r].size() >= rows[r - 1].size());
      ++seen[static_cast<size_t>(line)];
    }
    padded_grouped += static_cast<double>(b.ids.len * B);
    padded_any += static_cast<double>(d.draw(B, h).ids.len * B);
  }
  // Every line is drawn as often as without a pool: 400 times expected each
  // (24,000 rows over 60 lines). Pearson's statistic: the copies of a line
  // drawn into one pool sit side by side and fall in one block, so it
  // spreads wider than independent rows' (59 on average): about 89 +- 20
  // for this draw, and under 180 in 2,000 simulated runs of it. A pool that
  // favoured short or long lines (always its first, middle or last block)
  // gives 59,000 to 125,000.
  const double expect = static_cast<double>(draws * B) / 60;
  double chi2 = 0;
  for (int64_t n : seen) chi2 += (static_cast<double>(n) - expect) * (n - expect) / expect;
  CHECK(chi2 < 200);
  // The positions a batch takes: grouped, well under the ungrouped (the lines
  // are 1..20 tokens: about 18 a row ungrouped, and near a row's own length
  // grouped).
  CHECK(padded_grouped < 0.75 * padded_any);
  // A pool of 1 is the ungrouped draw: B lines, one randint each, in the
  // order drawn.
  Generator a = qkv::testing::test_generator(3), c = qkv::testing::test_generator(3);
  const std::vector<data::Seq> one = rows_of(d.draw(B, a, 1));
  for (int64_t r = 0; r < B; ++r)
    CHECK(one[static_cast<size_t>(r)].front() - 4 == c.randint(0, 60));
  check_error([&] { d.draw(B, a, 0); }, {"TextData::draw", "pool of 0 batches"});
  check_error([&] { d.draw(B, a, data::kMaxLengthPool + 1); }, {"TextData::draw", "(1 to 1024)"});
  static_assert(data::kMaxLengthPool == 1024);
}

TEST_CASE(
    "--group-by-length: off unless asked, refused without --line-by-line; a file that "
    "predates the key reads as ungrouped") {
  qkv::testing::TempDir d;
  const std::string file = d.file("t.txt");
  std::ofstream(file) << "one two three\nfour five six\nseven eight\nnine\n";
  train::TrainConfig c = bert_mlm(file);
  c.group_by_length = true;
  c.line_by_line = false;
  check_error([&] { train::Trainer t(c); }, {"--group-by-length", "--line-by-line"});
  // bert's defaults: line mode for mlm, not grouped (grouped pre-training
  // helped the fine-tune less, docs/bert.md); asked, it stays.
  const train::Family& bert = *train::find_family("bert");
  train::TrainConfig m;
  m.objective = "mlm";
  m.format = "text";
  train::TrainConfig lines = m;
  bert.settings.defaults(lines, [](const char*) { return false; });
  CHECK(lines.line_by_line);
  CHECK(!lines.group_by_length);
  train::TrainConfig asked = m;
  asked.group_by_length = true;
  bert.settings.defaults(asked, [](const char* k) { return std::string(k) == "group_by_length"; });
  CHECK(asked.line_by_line);
  CHECK(asked.group_by_length);
  c.line_by_line = true;
  train::Trainer grouped(c);  // taken with line mode, and it trains
  CHECK(grouped.cfg.group_by_length);
  CHECK(std::isfinite(grouped.step()));
  // train_config without the key (written before it): false, as those runs drew.
  auto j = asked.to_json();
  CHECK(j.at("group_by_length") == true);
  j.erase("group_by_length");
  CHECK(!train::TrainConfig::from_json(j, "test").group_by_length);
}
