// bow_classify: the bag-of-words baseline for text classification, trained by
// qkv: each text becomes the counts of its words, one Linear layer maps them
// to a score per label, and softmax cross-entropy trains it with Adam.
//
//   build/rel-f32/bow_classify --train train.tsv --test test.tsv [--train-limit 500] [--seed 1]
//
// Files hold "text<TAB>label" lines (datasets/make_packages.py writes them).
// Words are the text lowercased and cut at every byte that is not a letter or
// a digit (bytes of UTF-8 characters count as letters); the vocabulary is the
// --vocab most frequent words of the training examples used, never of the
// test file. --train-limit N trains on the first N examples of a shuffle of
// the training file drawn from --seed (so 500 and 2000 are subsets a seed
// fixes); the labels are those of the whole training file, and a test label
// not among them is refused. Prints the test accuracy beside the majority
// class's (the training subset's most frequent label). Fixed epochs: no
// choice is made on the test file.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/qkv_autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "data/loaders.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "optim/adam.h"

using namespace qkv;

namespace {

struct Example {
  std::vector<std::string> words;
  std::string label;
};

// Lowercased runs of letters and digits; a byte >= 0x80 (part of a UTF-8
// character) counts as a letter.
std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> out;
  std::string w;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) {
      w += ch;
    } else if (c >= 'A' && c <= 'Z') {
      w += static_cast<char>(c - 'A' + 'a');
    } else if (!w.empty()) {
      out.push_back(std::move(w));
      w.clear();
    }
  }
  if (!w.empty()) out.push_back(std::move(w));
  return out;
}

// "text<TAB>label" lines; a blank line is skipped, anything else malformed is
// an error naming the file and line.
std::vector<Example> read_examples(const std::string& flag, const std::string& path) {
  data::TextFile f;
  try {
    f = data::read_text_file(path, int64_t{1} << 30);
  } catch (const Error& e) {
    throw Error(flag + " " + e.what());
  }
  std::vector<Example> out;
  size_t at = 0;
  int64_t line = 0;
  while (at < f.text.size()) {
    size_t end = f.text.find('\n', at);
    if (end == std::string::npos) end = f.text.size();
    std::string s = f.text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = flag + " " + brief(path) + ":" + std::to_string(line) + ": ";
    const size_t tab = s.rfind('\t');
    if (tab == std::string::npos) throw Error(where + "expected 'text<TAB>label', found no tab");
    Example e{words_of(s.substr(0, tab)), s.substr(tab + 1)};
    if (e.label.empty() || e.label.find_first_of(" \t") != std::string::npos)
      throw Error(where + "expected one label after the last tab, found '" + brief(e.label) + "'");
    out.push_back(std::move(e));
  }
  if (out.empty()) throw Error(flag + " " + brief(path) + ": no examples in the file");
  return out;
}

// x (N, V_w): the word counts of examples[first .. first + N) over `vocab`.
void fill_counts(const std::vector<const Example*>& examples, size_t first, int64_t N,
                 const std::unordered_map<std::string, int64_t>& vocab, Tensor& x) {
  const int64_t Vw = x.shape()[1];
  real* p = x.data();
  std::fill(p, p + N * Vw, real(0));
  for (int64_t r = 0; r < N; ++r)
    for (const std::string& w : examples[first + r]->words)
      if (auto it = vocab.find(w); it != vocab.end()) p[r * Vw + it->second] += 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bow_classify: a bag-of-words linear classifier trained by qkv (text<TAB>label)"};
  std::string train_path, test_path;
  int64_t train_limit = 0, vocab_cap = 20000, epochs = 20, batch = 32;
  uint64_t seed = 1;
  double lr = 1e-2;
  int threads = 1;
  app.add_option("--train", train_path, "training examples, text<TAB>label lines")
      ->type_name("PATH")
      ->required();
  app.add_option("--test", test_path, "held-out examples, scored once at the end")
      ->type_name("PATH")
      ->required();
  app.add_option("--train-limit", train_limit,
                 "train on the first N examples of a seeded shuffle (0 = all)")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "the shuffle's and the initial weights' seed (default 1)")
      ->type_name("S");
  app.add_option("--vocab", vocab_cap, "at most this many words, the most frequent (default 20000)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  app.add_option("--epochs", epochs, "passes over the training examples (default 20)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "examples per step (default 32)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Adam's learning rate (default 0.01)")
      ->type_name("X")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "threads (default 1)")
      ->type_name("N")
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(threads);
    const std::vector<Example> train_all = read_examples("--train", train_path);
    const std::vector<Example> test = read_examples("--test", test_path);

    // Labels: those of the whole training file, sorted (ids do not depend on
    // the order of the lines).
    std::map<std::string, int64_t> label_id;
    for (const Example& e : train_all) label_id.emplace(e.label, 0);
    std::vector<std::string> labels;
    for (auto& [name, id] : label_id) {
      id = static_cast<int64_t>(labels.size());
      labels.push_back(name);
    }
    for (size_t i = 0; i < test.size(); ++i)
      if (!label_id.count(test[i].label))
        throw Error("--test " + brief(test_path) + ": label '" + brief(test[i].label) +
                    "' of example " + std::to_string(i + 1) + " is not in --train's " +
                    std::to_string(labels.size()) + " labels");
    const int64_t C = static_cast<int64_t>(labels.size());

    // The training subset: a seeded Fisher-Yates shuffle, then the first N.
    Generator g(seed);
    std::vector<const Example*> train;
    for (const Example& e : train_all) train.push_back(&e);
    for (size_t i = train.size(); i > 1; --i) std::swap(train[i - 1], train[g.next_u64() % i]);
    if (train_limit > 0 && train_limit < static_cast<int64_t>(train.size()))
      train.resize(static_cast<size_t>(train_limit));
    const int64_t N = static_cast<int64_t>(train.size());

    // The vocabulary: the most frequent words of the training subset (ties
    // by the word), at most vocab_cap of them.
    std::unordered_map<std::string, int64_t> counts;
    for (const Example* e : train)
      for (const std::string& w : e->words) ++counts[w];
    std::vector<std::pair<std::string, int64_t>> by_count(counts.begin(), counts.end());
    std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    if (static_cast<int64_t>(by_count.size()) > vocab_cap) by_count.resize(vocab_cap);
    std::unordered_map<std::string, int64_t> vocab;
    for (const auto& [w, n] : by_count) vocab.emplace(w, static_cast<int64_t>(vocab.size()));
    const int64_t Vw = static_cast<int64_t>(vocab.size());
    if (Vw == 0) throw Error("--train " + brief(train_path) + ": no words in the examples used");

    std::vector<int64_t> y(static_cast<size_t>(N));  // (N) label ids
    std::vector<int64_t> per_label(static_cast<size_t>(C), 0);
    for (int64_t i = 0; i < N; ++i) ++per_label[y[i] = label_id.at(train[i]->label)];
    const int64_t majority =
        std::max_element(per_label.begin(), per_label.end()) - per_label.begin();

    std::printf(
        "bow_classify: %lld training examples (of %zu, seed %llu), %lld labels, %lld words; "
        "%lld epochs of batch %lld, Adam lr %g\n",
        static_cast<long long>(N), train_all.size(), static_cast<unsigned long long>(seed),
        static_cast<long long>(C), static_cast<long long>(Vw), static_cast<long long>(epochs),
        static_cast<long long>(batch), lr);

    nn::Linear model(Vw, C, /*bias=*/true, g);  // (C, V_w) weight, (C) bias
    optim::Adam opt(model.parameters(), static_cast<real>(lr));
    Tensor x = Tensor::zeros({batch, Vw});  // (B, V_w), refilled each step
    std::vector<int64_t> order(static_cast<size_t>(N));
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      for (int64_t i = 0; i < N; ++i) order[i] = i;
      for (int64_t i = N; i > 1; --i) std::swap(order[i - 1], order[g.next_u64() % i]);
      std::vector<const Example*> shuffled(static_cast<size_t>(N));
      std::vector<int64_t> targets;
      for (int64_t i = 0; i < N; ++i) shuffled[i] = train[order[i]];
      double loss_sum = 0;
      for (int64_t at = 0; at < N; at += batch) {
        const int64_t B = std::min(batch, N - at);
        Tensor xb = B == batch ? x : Tensor::zeros({B, Vw});  // the last, shorter batch
        fill_counts(shuffled, static_cast<size_t>(at), B, vocab, xb);
        targets.assign(static_cast<size_t>(B), 0);
        for (int64_t r = 0; r < B; ++r) targets[r] = y[order[at + r]];
        Var loss = nn::cross_entropy(model(Var(xb)), targets);  // (B, C) logits -> scalar
        opt.zero_grad();
        loss.backward();
        opt.step();
        loss_sum += static_cast<double>(loss.item()) * B;
      }
      if (epoch == 1 || epoch == epochs || epoch % 5 == 0)
        std::printf("  epoch %3lld  training loss %.4f\n", static_cast<long long>(epoch),
                    loss_sum / static_cast<double>(N));
    }

    // The test file, once.
    std::vector<const Example*> held;
    for (const Example& e : test) held.push_back(&e);
    int64_t right = 0, right_majority = 0;
    const int64_t M = static_cast<int64_t>(held.size());
    for (int64_t at = 0; at < M; at += batch) {
      const int64_t B = std::min(batch, M - at);
      Tensor xb = Tensor::zeros({B, Vw});
      fill_counts(held, static_cast<size_t>(at), B, vocab, xb);
      const Tensor logits = model(Var(xb)).data();  // (B, C)
      for (int64_t r = 0; r < B; ++r) {
        const real* row = logits.data() + r * C;
        const int64_t guess = std::max_element(row, row + C) - row;
        const int64_t truth = label_id.at(held[at + r]->label);
        right += guess == truth;
        right_majority += majority == truth;
      }
    }
    std::printf("test accuracy %.4f (%lld of %lld); majority class '%s' %.4f (%lld of %lld)\n",
                static_cast<double>(right) / M, static_cast<long long>(right),
                static_cast<long long>(M), brief(labels[majority]).c_str(),
                static_cast<double>(right_majority) / M, static_cast<long long>(right_majority),
                static_cast<long long>(M));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bow_classify: %s\n", e.what());
    return 1;
  }
  return 0;
}
