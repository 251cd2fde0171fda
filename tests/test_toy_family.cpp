// A model family added from outside the library (tests/toy_family.h: its own
// file, no line of the library changed) trains through the trainer's code
// path, evaluates, answers, and saves and loads as a checkpoint and as a
// model file: the registration shape of trainer/family.h holds. So does a kind
// of positions of its own (trainer/positions.h), listed by a family's row,
// a source of data of its own (trainer/data_sources.h), a kind of
// evaluation (trainer/eval_kinds.h) and a kind of tokens
// (trainer/token_kinds.h).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "errors.h"
#include "temp_dir.h"
#include "test_seed.h"
#include "toy_family.h"
#include "trainer/data_sources.h"
#include "trainer/eval_kinds.h"
#include "trainer/positions.h"
#include "trainer/run.h"
#include "trainer/token_kinds.h"
#include "trainer/trainer.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::TempDir;
using qkv::testing::test_seed;

namespace {

train::TrainConfig bag_config() {
  train::TrainConfig c;
  c.model = "bag";
  c.task = "copy";  // each label is its token: a per-token model can learn it
  c.vocab = 6;
  c.min_len = 2;
  c.max_len = 5;
  c.d_model = 16;
  c.batch = 16;
  c.steps = 60;
  c.warmup = 1;
  c.lr = real(0.05);
  c.heldout = 30;
  c.min_lr = c.lr * real(0.05);  // what the Trainer makes of kAutoMinLr, for validate()
  c.seed = test_seed();
  return c;
}

// The logits of `m` on the first held-out pairs, as numbers.
std::vector<real> logits_of(nn::Model& m, const std::vector<data::Pair>& pairs) {
  NoGradGuard no_grad;
  m.eval();
  const Tensor t = m.forward_pairs(pairs).logits.data();
  return std::vector<real>(t.data(), t.data() + t.numel());
}

}  // namespace

TEST_CASE("a toy family registered from a test's own file trains, answers, saves and loads") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  train::Trainer t(bag_config());
  CHECK(std::string(t.model().kind()) == "bag");
  CHECK(&t.family() == train::find_family("bag"));
  CHECK(train::family_names() == "seq2seq, gpt, encoder, bert, vit or bag");

  // Training through the trainer's step: the loss falls, and copying is learnt.
  const real first = t.step();
  real last = first;
  while (t.step_count() < t.cfg.steps) last = t.step();
  CHECK(last < 0.5 * first);
  const train::EvalResult r = t.evaluate();
  CHECK(r.token_acc() > 0.9);  // labels scored alone (labels_tokens), no </s>

  // The family's answerer: the label of every source token.
  std::vector<data::Pair> held;
  t.pairs->heldout().batch(0, 4, held);
  const std::vector<data::Seq> a = t.answer({held[0].src});
  CHECK(a.front().size() == held[0].src.size());
  t.decoding.method = "beam";
  CHECK_THROWS_WITH_AS(t.check_decoding(),
                       "--decode beam: the bag model labels every token at once", Error);
  t.decoding.method = "greedy";

  // A training checkpoint: resumed, the same model, step and logits.
  const std::string ckpt = dir.file("bag.ckpt");
  t.save(ckpt);
  train::Trainer back = train::Trainer::resume(ckpt);
  CHECK(std::string(back.model().kind()) == "bag");
  CHECK(back.step_count() == t.step_count());
  CHECK(back.cfg.d_model == t.cfg.d_model);
  CHECK(logits_of(back.model(), held) == logits_of(t.model(), held));

  // A model file: nn::load_model finds the family's codec by its kind.
  const std::string file = dir.file("bag.safetensors");
  nn::save_model(t.model(), file);
  CHECK(nn::model_kind(file) == "bag");
  std::unique_ptr<nn::Model> m = nn::load_model(file);
  CHECK(logits_of(*m, held) == logits_of(t.model(), held));
  CHECK(nn::answer(*m, {held[0].src}) == a);
}

namespace {

// A kind of positions of the test's own: it adds nothing to the embedding and
// hands attention nothing (the bag model reads no positions), with a rule of
// its own on the run.
train::PositionKind counted_positions() {
  train::PositionKind k;
  k.name = "counted";
  k.help = "counted (a toy)";
  k.check = [](const train::TrainConfig& c, const train::Require& require) {
    require(c.d_model >= 8, "d_model", "counted positions need d_model >= 8");
  };
  return k;
}

}  // namespace

TEST_CASE(
    "a position kind registered from a test's own code is read from the tables: a family that "
    "lists it validates, trains and resumes with it; one that does not refuses it; removed, it "
    "is unknown") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  {
    train::register_position_kind(counted_positions());
    struct Unregister {
      ~Unregister() { train::unregister_position_kind("counted"); }
    } unregister;
    // The bag family's row lists it, its default first.
    train::Family bag = *train::find_family("bag");
    bag.model.positions = "counted sinusoidal";
    train::unregister_family("bag");
    train::register_family(bag);

    CHECK(train::position_kinds().names() == "sinusoidal, learned, rope, relative or counted");
    CHECK(train::position_help() ==
          "sinusoidal, learned, rope (gpt), relative (T5) or counted (a toy)");
    train::TrainConfig c = bag_config();
    c.positions = "counted";
    c.steps = 2;
    CHECK_NOTHROW(train::validate(c, ""));
    // The kind's own rule, naming the flag.
    c.d_model = 4;
    CHECK(error_of([&] { train::validate(c, ""); }) ==
          "--d-model: counted positions need d_model >= 8");
    c.d_model = 16;
    // A family whose row does not list it refuses it, in its own words...
    train::TrainConfig gpt = c;
    gpt.model = "gpt";
    CHECK(error_of([&] { train::validate(gpt, ""); }) ==
          "--positions: the gpt model has a learned position table, rotary positions (rope) or "
          "T5's relative bias (relative), not 'counted'");
    // ... and a row with no words of its own by its list.
    train::TrainConfig learned = c;
    learned.positions = "learned";
    CHECK(error_of([&] { train::validate(learned, ""); }) ==
          "--positions: the bag model takes counted or sinusoidal positions, not 'learned'");

    // It trains, and a checkpoint resumes with it.
    train::Trainer t(c);
    t.step();
    const std::string ckpt = dir.file("counted.ckpt");
    t.save(ckpt);
    CHECK(train::Trainer::resume(ckpt).cfg.positions == "counted");
  }
  CHECK(train::find_position_kind("counted") == nullptr);
  train::TrainConfig c = bag_config();
  c.positions = "counted";
  CHECK(error_of([&] { train::validate(c, ""); }) ==
        "--positions: expected sinusoidal, learned, rope or relative, got 'counted'");
}

TEST_CASE(
    "the built-in position kinds hand attention their settings and are recognised back from a "
    "model file's") {
  for (const char* name : {"sinusoidal", "learned", "rope", "relative"}) {
    CAPTURE(name);
    train::TrainConfig c;
    c.positions = name;
    c.rope_base = 500;
    c.rel_buckets = 8;
    c.rel_max_distance = 20;
    nn::AttentionSettings a;
    train::attention_to_model(c, a);
    CHECK(a.rope_base == (c.positions == "rope" ? 500 : 0));
    CHECK(a.rel_buckets == (c.positions == "relative" ? 8 : 0));
    train::TrainConfig back;
    back.positions = "sinusoidal";  // a family's own, which the settings leave
    train::attention_from_model(back, a);
    CHECK(back.positions == (a.rope_base > 0 || a.rel_buckets > 0 ? c.positions : "sinusoidal"));
    if (back.positions == "relative") CHECK(back.rel_max_distance == 20);
    if (back.positions == "rope") CHECK(back.rope_base == 500);
  }
}

namespace {

// A data source of the test's own (format "words"): each line of --data is a
// sequence of words, and its pair is (the words, the words), which the bag
// model learns to copy; every fourth line is held out.
train::DataNeed read_word_lines(train::Trainer& t, const data::Vocab* given) {
  std::ifstream in(t.cfg.data);
  if (!in) throw Error("--data " + t.cfg.data + ": cannot be read");
  std::vector<std::vector<std::string>> lines;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    lines.emplace_back(std::istream_iterator<std::string>(words),
                       std::istream_iterator<std::string>());
  }
  if (given) {
    t.vocab = *given;
  } else {
    std::set<std::string> distinct;
    for (const auto& l : lines) distinct.insert(l.begin(), l.end());
    t.vocab = data::Vocab::from_tokens({distinct.begin(), distinct.end()});
  }
  std::vector<data::Pair> train, held;
  train::DataNeed need{0, ""};
  for (size_t i = 0; i < lines.size(); ++i) {
    const data::Seq ids = t.vocab.encode(lines[i]);
    (i % 4 == 3 ? held : train).push_back({ids, ids});
    if (int64_t(ids.size()) > need.tokens)
      need = {int64_t(ids.size()), t.cfg.data + ":" + std::to_string(i + 1)};
  }
  t.pairs = std::make_unique<data::PairData>(std::move(train), std::move(held));
  *t.data_info = {{"kind", "words"}};
  return need;
}

train::DataSource word_lines_source() {
  train::DataSource s;
  s.name = "word-lines";
  s.help = "lines of words, each its own label (a toy)";
  s.format = "words";
  s.read = read_word_lines;
  return s;
}

}  // namespace

TEST_CASE("the data-source table picks each run's row by format, and a row's takes first") {
  auto source = [](const std::string& data, const std::string& format, const std::string& objective,
                   bool line_by_line) {
    train::TrainConfig c;
    c.data = data;
    c.format = format;
    c.objective = objective;
    c.line_by_line = line_by_line;
    return std::string(train::data_source(c).name);
  };
  CHECK(source("", "tsv", "", false) == "task");
  CHECK(source("p.tsv", "tsv", "", false) == "pairs");
  CHECK(source("p.tsv", "tsv", "classify", false) == "labels");
  CHECK(source("t.txt", "text", "mlm", false) == "windows");
  CHECK(source("t.txt", "text", "mlm", true) == "lines");
  CHECK(source("images", "idx", "", false) == "images");
  CHECK(train::data_formats() == "tsv, text, idx or squad");
  CHECK(error_of([&] { source("x", "csv", "", false); }) ==
        "--format: expected tsv, text, idx or squad, got 'csv'");
}

TEST_CASE("what a format's files hold is its rows' to say, and the rows of a format agree") {
  using Holds = train::DataSource::Holds;
  CHECK(train::format_holds("text") == Holds::kCorpus);
  CHECK(train::format_holds("idx") == Holds::kImages);
  CHECK(train::format_holds("tsv") == Holds::kExamples);
  CHECK(train::format_holds("") == Holds::kExamples);     // the built-in tasks
  CHECK(train::format_holds("csv") == Holds::kExamples);  // no row reads it
  train::TrainConfig c;
  c.format = "text";
  CHECK_FALSE(train::reads_corpus(c));  // no --data: a task
  c.data = "t.txt";
  CHECK(train::reads_corpus(c));
  // A second row of --format text that says its files hold images is refused.
  train::DataSource odd = word_lines_source();
  odd.format = "text";
  odd.holds = Holds::kImages;
  CHECK(error_of([&] { train::register_data_source(odd); }) ==
        "register_data_source: 'word-lines' reads --format text as windows does, but says its "
        "files hold something else");
  CHECK(train::data_sources().find("word-lines") == nullptr);
}

TEST_CASE(
    "a data source registered from a test's own code is read from the table: --format takes "
    "it, a run trains and resumes on it; removed, its format is unknown") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  const std::string data = dir.file("words.txt");
  {
    std::ofstream out(data);
    const char* words[] = {"red", "green", "blue", "cyan", "pink"};
    for (int i = 0; i < 200; ++i)
      out << words[i % 5] << ' ' << words[(i * 3 + 1) % 5] << ' ' << words[(i * 7 + 2) % 5] << '\n';
  }
  train::TrainConfig c = bag_config();
  c.data = data;
  c.format = "words";
  {
    train::register_data_source(word_lines_source());
    struct Unregister {
      ~Unregister() { train::unregister_data_source("word-lines"); }
    } unregister;
    CHECK(train::data_formats() == "tsv, text, idx, squad or words");
    CHECK_NOTHROW(train::validate(c, ""));
    train::Trainer t(c);
    CHECK(t.vocab.size() == data::Vocab::from_tokens({}).size() + 5);  // the specials, 5 words
    CHECK(t.cfg.context == 3);  // the data's longest sequence
    const real first = t.step();
    real last = first;
    while (t.step_count() < t.cfg.steps) last = t.step();
    CHECK(last < 0.5 * first);
    CHECK(t.evaluate().token_acc() > 0.9);
    // A checkpoint resumes, reading the data again through the row.
    const std::string ckpt = dir.file("words.ckpt");
    t.save(ckpt);
    train::Trainer back = train::Trainer::resume(ckpt);
    CHECK(back.step_count() == t.step_count());
    CHECK(back.pairs->heldout().size() == 50);
  }
  CHECK(error_of([&] { train::validate(c, ""); }) ==
        "--format: expected tsv, text, idx or squad, got 'words'");
}

namespace {

// An evaluation kind of the test's own, scoring the bag model's runs: judged
// by the held-out loss (so the run keeps its best checkpoint), its log.csv
// cells marked, its report counted.
int toy_reports = 0;
train::EvalKind toy_eval() {
  train::EvalKind k;
  k.name = "bag-tokens";
  k.help = "token accuracy of the bag model (a toy)";
  k.takes = [](const train::Trainer& t) { return t.cfg.model == "bag"; };
  k.line = [](const train::EvalResult& r) { return "toy " + std::to_string(r.token_acc()); };
  k.summary = [](const train::EvalResult& r) { return std::string("toy summary"); };
  k.cells = [](const train::EvalResult& r) {
    return train::EvalCells{"", std::to_string(r.token_acc()), std::to_string(r.loss), "", "7"};
  };
  k.judged_by = plots::EvalKind::Loss;
  k.metric = [](const train::EvalResult& r) { return r.loss; };
  k.final_report = [](train::Trainer& t, const train::RunOptions&) {
    ++toy_reports;
    return t.evaluate();
  };
  return k;
}

}  // namespace

TEST_CASE(
    "an evaluation kind registered from a test's own code is read from the table: the run's "
    "results carry it, log.csv gets its cells, it keeps a best checkpoint and reports at the "
    "end") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  CHECK(train::eval_kinds().names() == "labels, masked, text, sequences or qa");
  {
    train::register_eval_kind(toy_eval());
    struct Unregister {
      ~Unregister() { train::unregister_eval_kind("bag-tokens"); }
    } unregister;
    train::TrainConfig c = bag_config();
    c.steps = 20;
    train::Trainer t(c);
    CHECK(std::string(train::eval_kind(t).name) == "bag-tokens");
    CHECK(std::string(t.evaluate().kind->name) == "bag-tokens");
    train::RunOptions o;
    o.out_dir = dir.file("run");
    o.eval_every = 10;
    o.no_early_stop = true;
    toy_reports = 0;
    CHECK(train::run(t, o, "") == 0);
    CHECK(toy_reports == 1);
    CHECK(std::filesystem::exists(o.best_path));  // judged by loss: the best is kept
    // The held-out rows of log.csv (steps 10 and 20) hold the kind's cells.
    std::ifstream log(o.out_dir + "/log.csv");
    int held_rows = 0;
    for (std::string line; std::getline(log, line);)
      if (line.size() > 2 && line.substr(line.size() - 2) == ",7") ++held_rows;
    CHECK(held_rows == 2);
  }
  // Removed, the bag model's runs are the general row's again.
  train::Trainer t(bag_config());
  CHECK(std::string(train::eval_kind(t).name) == "sequences");
}

namespace {

// A kind of tokens of the test's own: words, as word tokens cut them, put
// back together with '_' between them.
train::TokenKind underscored_words() {
  train::TokenKind k;
  k.name = "underscored";
  k.help = "a word, joined by _ (a toy)";
  k.split = data::Split::Word;
  k.encode = [](const data::Vocab& v, const std::string& text, int64_t* unknown) {
    return v.encode(data::split_tokens(text, data::Split::Word), unknown);
  };
  k.decode = [](const data::Vocab& v, const data::Seq& ids) { return v.decode(ids, "_"); };
  return k;
}

}  // namespace

TEST_CASE(
    "a token kind registered from a test's own code is read from the table: --tokens takes it, "
    "a run reads, answers and writes it, a checkpoint resumes with it; removed, it is unknown") {
  const toy::BagFamilyRegistered registered;
  TempDir dir;
  const std::string data = dir.file("pairs.tsv");
  {
    std::ofstream out(data);
    const char* words[] = {"red", "green", "blue", "cyan"};
    for (int i = 0; i < 60; ++i)
      out << words[i % 4] << ' ' << words[(i + 1) % 4] << '\t' << words[i % 4] << ' '
          << words[(i + 1) % 4] << '\n';
  }
  train::TrainConfig c = bag_config();
  c.data = data;
  c.tokens = "underscored";
  c.steps = 2;
  CHECK(train::token_kinds().names() == "char, word or bpe");
  {
    train::register_token_kind(underscored_words());
    struct Unregister {
      ~Unregister() { train::unregister_token_kind("underscored"); }
    } unregister;
    CHECK_NOTHROW(train::validate(c, ""));
    // A learned kind's size goes with the learned kinds alone.
    train::TrainConfig sized = c;
    sized.bpe_vocab = 300;
    CHECK(error_of([&] { train::validate(sized, ""); }) ==
          "--bpe-vocab: goes with --tokens bpe (this run reads --tokens underscored)");
    train::Trainer t(c);
    CHECK(t.vocab.find("green") >= 0);  // cut into words
    CHECK(t.decode_text(t.encode_text("red blue")) == "red_blue");
    t.step();
    const std::string ckpt = dir.file("tokens.ckpt");
    t.save(ckpt);
    CHECK(read_safetensors(ckpt).metadata.at("tokenizer") == "underscored");
    train::Trainer back = train::Trainer::resume(ckpt);
    CHECK(back.cfg.tokens == "underscored");
    CHECK(back.decode_text(back.encode_text("cyan red")) == "cyan_red");
  }
  CHECK(error_of([&] { train::validate(c, ""); }) ==
        "--tokens: expected char, word or bpe, got 'underscored'");
}

TEST_CASE("an evaluation kind's line holds a perplexity of any size (e^700 prints 300 digits)") {
  const train::EvalKind& text = *train::eval_kinds().find("text");
  train::EvalResult r;
  r.loss = 700;
  r.bits_per_byte = 1.5;
  const std::string line = text.line(r);
  CHECK(line.size() > 300);
  CHECK(line.substr(line.size() - 22) == ", 1.5000 bits per byte");
  CHECK(text.summary(r).substr(text.summary(r).size() - 23) == ", bits per byte: 1.5000");
}
