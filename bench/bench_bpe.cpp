// bench_bpe: the byte-level BPE tokenizer's training and encoding speed (one
// core; the tokenizer runs on one thread).
//
//   make prose && build/rel-f32/bench_bpe --text build/datasets/prose/train.txt --vocab 4096
//
// Trains on the whole text (best of --repeats passes), then encodes it and
// decodes it back, checking that the round trip is exact; prints MB/s for
// each and the bytes per token.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "data/bpe.h"

using namespace qkv;

int main(int argc, char** argv) {
  CLI::App app{"bench_bpe: BPE training and encoding speed"};
  std::string path;
  int64_t vocab = 4096;
  int repeats = 2;
  app.add_option("--text", path, "the text to train on and encode")->required();
  app.add_option("--vocab", vocab, "the vocabulary size (256 bytes + merges)");
  app.add_option("--repeats", repeats, "passes; the best is reported")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  try {
    // A regular file only: a folder reads as empty, and a FIFO would block.
    std::error_code ec;
    if (path.empty()) throw Error("bench_bpe: --text: the path is empty");
    if (!std::filesystem::is_regular_file(path, ec))
      throw Error("bench_bpe: --text " + brief(path) + ": not a regular file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("bench_bpe: --text " + brief(path) + ": cannot read it");
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    using clock = std::chrono::steady_clock;
    auto seconds = [](clock::time_point a, clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    double train_s = 1e30, encode_s = 1e30;
    std::vector<int32_t> ids;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = clock::now();
      data::BPE bpe = data::BPE::train(text, vocab);
      const auto t1 = clock::now();
      ids = bpe.encode(text);
      const auto t2 = clock::now();
      train_s = std::min(train_s, seconds(t0, t1));
      encode_s = std::min(encode_s, seconds(t1, t2));
      if (bpe.decode(ids) != text) throw Error("bench_bpe: the round trip is not exact");
    }
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf(
        "%s: %.2f MB, vocab %lld: train %.2f s (%.2f MB/s), encode %.2f s (%.2f MB/s), %.2f "
        "bytes/token, round trip exact\n",
        path.c_str(), mb, static_cast<long long>(vocab), train_s, mb / train_s, encode_s,
        mb / encode_s, static_cast<double>(text.size()) / static_cast<double>(ids.size()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
