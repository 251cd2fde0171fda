// bench_decode: decoding speed of the encoder-decoder on the reverse task.
//
//   build/rel-f32/bench_decode --len 32 --threads 1
//   build/rel-f32/bench_decode --len 10 --threads 2 --json --save-init w.safetensors
//       --save-src src.safetensors --save-out out.safetensors   (one command)
//
// `count` reverse-task sources of exactly `len` symbols (drawn from a seeded
// Generator, as the trainer's held-out set is), decoded in batches of `batch`
// by the model of bench_train's "small" shape (d_model 128, 4 heads, 2+2
// layers, d_ff 512, Post-LN, ReLU, sinusoidal positions) with seeded random
// weights. Every output is fixed-length, len + 1 tokens (what a trained model
// emits: the reversed symbols and <eos>): the decoders run with ignore_eos, so
// all implementations do exactly the same steps whatever the weights predict.
//
// Modes, each timed over all `count` sources, best of --repeats passes:
//   cached     greedy_decode (the KV cache: one decoder step per new token)
//   uncached   greedy_decode with use_cache = false (the decoder reruns over
//              the whole prefix every step, as a first implementation does)
//   beam       beam_search, beam 4, alpha 0.6 (every hypothesis to the cap)
// tokens/s = count * (len + 1) generated tokens / seconds (for beam: per
// source, not per hypothesis). --kv-heads K gives the decoder's self-attention
// K key/value heads (grouped-query attention; 0: every head), and each line
// reports the bytes the KV cache holds for one batch at full length: the
// decoder self-attention's [K | V] (K/H of the full heads' under grouped-query
// attention) and the cross-attention's encoder memory (always every head). With
// --save-init/--save-src/--save-out it writes the weights, the sources and the cached greedy
// outputs (ids as F32) for bench/bench_decode_torch.py, which decodes the same sources in PyTorch
// and checks that its tokens agree.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "checkpoint/checkpoint.h"
#include "generation/decode.h"
#include "generation/kv_cache.h"
#include "io/safetensors.h"

using namespace qkv;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kFirstSymbol = 3, kSymbols = 10;

Tensor ids_tensor(const std::vector<int64_t>& ids, int64_t rows, int64_t cols) {
  std::vector<real> v(ids.begin(), ids.end());  // small integers: exact in F32
  return Tensor::from_vector(v, {rows, cols});
}

}  // namespace

// --seed's default, the model's initialisation and the sources': any fixed
// value, so that runs time the same work.
constexpr uint64_t kBenchSeed = 1;

int main(int argc, char** argv) {
  int64_t len = 32, count = 1000, batch = 64;
  int64_t heads = 4, kv_heads = 0;
  int threads = 1, repeats = 3;
  uint64_t seed = kBenchSeed;
  std::string modes = "cached,uncached,beam", save_init, save_src, save_out;
  bool json = false;
  CLI::App app{"bench_decode: decoding tokens/s, cached vs uncached greedy and beam search (qkv)"};
  app.add_option("--len", len, "source length (symbols); outputs are len + 1 tokens")
      ->check(CLI::Range(1, 1000));
  app.add_option("--count", count, "sources decoded per pass")->check(CLI::Range(1, 1000000));
  app.add_option("--batch", batch, "sources per batch")->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "threads for our kernels and OpenBLAS")
      ->check(CLI::Range(1, 256));
  app.add_option("--repeats", repeats, "timed passes per mode (the fastest is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--seed", seed, "seed of the weights and the sources");
  app.add_option("--heads", heads, "attention heads (d_model 128)")->check(CLI::Range(1, 128));
  app.add_option("--kv-heads", kv_heads,
                 "key/value heads of the decoder self-attention (grouped-query; 0: --heads)")
      ->check(CLI::Range(0, 128));
  app.add_option("--modes", modes, "comma-separated: cached, uncached, beam");
  app.add_option("--save-init", save_init, "write the weights here (safetensors, qkv names)");
  app.add_option("--save-src", save_src, "write the sources here (ids as F32, (count, len))");
  app.add_option("--save-out", save_out,
                 "write the cached greedy outputs here (ids as F32, (count, len + 1))");
  app.add_flag("--json", json, "one JSON line per mode");
  CLI11_PARSE(app, argc, argv);

  try {
    set_num_threads(threads);
    nn::TransformerConfig cfg;
    cfg.src_vocab = cfg.tgt_vocab = kFirstSymbol + kSymbols;
    cfg.d_model = 128;
    cfg.heads = heads;
    cfg.kv_heads = kv_heads;
    if (kv_heads != 0 && !save_init.empty())
      throw Error(
          "bench_decode: --save-init writes weights for bench_decode_torch.py, which has "
          "no grouped-query attention (--kv-heads " +
          std::to_string(kv_heads) + ")");
    cfg.encoder_layers = cfg.decoder_layers = 2;
    cfg.d_ff = 512;
    cfg.dropout = 0;
    cfg.pre_norm = false;
    cfg.activation = nn::Activation::ReLU;
    cfg.seed = seed;
    nn::Seq2SeqTransformer model(cfg);
    model.eval();

    Generator g(seed * 7919 + 17);
    std::vector<int64_t> src_ids(static_cast<size_t>(count * len));
    for (auto& id : src_ids) id = kFirstSymbol + g.randint(0, kSymbols);
    std::vector<nn::Tokens> batches;
    for (int64_t i = 0; i < count; i += batch) {
      const int64_t n = std::min(batch, count - i);
      batches.push_back(nn::Tokens{
          std::vector<int64_t>(src_ids.begin() + i * len, src_ids.begin() + (i + n) * len), n, len,
          std::vector<int64_t>(static_cast<size_t>(n), len)});
    }
    const Metadata meta{{"model", "seq2seq"},
                        {"d_model", "128"},
                        {"heads", std::to_string(heads)},
                        {"d_ff", "512"},
                        {"encoder_layers", "2"},
                        {"decoder_layers", "2"},
                        {"vocab", std::to_string(cfg.tgt_vocab)},
                        {"norm_first", "false"},
                        {"activation", "relu"},
                        {"positions", "sinusoidal"},
                        {"tied", "false"},
                        {"len", std::to_string(len)},
                        {"bos", std::to_string(kBos)},
                        {"seed", std::to_string(seed)}};
    if (!save_init.empty()) nn::save(model, save_init, meta);
    if (!save_src.empty())
      write_safetensors(save_src, {{"src", ids_tensor(src_ids, count, len)}}, meta);

    nn::DecodeOptions greedy;
    greedy.bos = kBos;
    greedy.eos = kEos;
    greedy.pad = kPad;
    greedy.max_new_tokens = len + 1;
    greedy.ignore_eos = true;
    nn::BeamOptions beam;
    beam.beam = 4;
    beam.alpha = 0.6;
    beam.max_new_tokens = len + 1;
    beam.bos = kBos;
    beam.eos = kEos;
    beam.pad = kPad;
    beam.ignore_eos = true;

    // The cache's bytes for one batch at full length (len + 1 target positions).
    int64_t self_bytes = 0, memory_bytes = 0;
    {
      const nn::KVCache c = nn::start_decoding(model, batches.front(), len + 1);
      for (const Tensor& t : c.self_kv) self_bytes += t.numel() * int64_t(sizeof(real));
      for (const Tensor& t : c.memory_kv) memory_bytes += t.numel() * int64_t(sizeof(real));
    }
    std::vector<std::vector<int64_t>> cached_out;
    auto run = [&](const std::string& mode) {  // one pass over all batches
      std::vector<std::vector<int64_t>> out;
      for (const nn::Tokens& b : batches) {
        if (mode == "beam") {
          for (auto& h : nn::beam_search(model, b, beam)) out.push_back(h.tokens);
        } else {
          nn::DecodeOptions o = greedy;
          o.use_cache = mode == "cached";
          for (auto& s : nn::greedy_decode(model, b, o)) out.push_back(s);
        }
      }
      return out;
    };

    std::stringstream ms(modes);
    std::string mode;
    double cached_s = 0;
    while (std::getline(ms, mode, ',')) {
      if (mode != "cached" && mode != "uncached" && mode != "beam")
        throw Error("bench_decode: unknown mode '" + mode + "' (cached, uncached, beam)");
      {  // warm-up: one batch (pools, the position table, BLAS buffers)
        std::vector<nn::Tokens> all;
        all.swap(batches);
        batches.push_back(all.front());
        run(mode);
        batches.swap(all);
      }
      double best = 1e300;
      std::vector<std::vector<int64_t>> out;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = Clock::now();
        out = run(mode);
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      }
      // Agreement with the cached greedy tokens (cached vs uncached must be equal).
      double agree = -1;
      if (mode == "cached") {
        cached_out = out;
        cached_s = best;
      } else if (mode == "uncached" && !cached_out.empty()) {
        int64_t same = 0;
        for (size_t i = 0; i < out.size(); ++i) same += out[i] == cached_out[i];
        agree = static_cast<double>(same) / static_cast<double>(out.size());
      }
      const double tokens = static_cast<double>(count * (len + 1));
      if (json) {
        std::printf(
            "{\"impl\": \"qkv\", \"mode\": \"%s\", \"len\": %lld, \"count\": %lld, \"batch\": "
            "%lld, "
            "\"threads\": %d, \"seconds\": %.6f, \"tokens_per_s\": %.1f, \"same_as_cached\": %.4f, "
            "\"vs_cached\": %.4f, \"heads\": %lld, \"kv_heads\": %lld, \"cache_self_bytes\": "
            "%lld, \"cache_memory_bytes\": %lld}\n",
            mode.c_str(), static_cast<long long>(len), static_cast<long long>(count),
            static_cast<long long>(batch), threads, best, tokens / best, agree,
            cached_s > 0 ? best / cached_s : -1.0, static_cast<long long>(heads),
            static_cast<long long>(model.cfg.kv_heads ? model.cfg.kv_heads : heads),
            static_cast<long long>(self_bytes), static_cast<long long>(memory_bytes));
      } else {
        std::printf(
            "%-9s len %lld, %lld sources, batch %lld, %d thread(s), kv heads %lld of %lld "
            "(cache: self %lld B, memory %lld B): %.3f s, %.0f tokens/s%s\n",
            mode.c_str(), static_cast<long long>(len), static_cast<long long>(count),
            static_cast<long long>(batch), threads,
            static_cast<long long>(model.cfg.kv_heads ? model.cfg.kv_heads : heads),
            static_cast<long long>(heads), static_cast<long long>(self_bytes),
            static_cast<long long>(memory_bytes), best, tokens / best,
            agree >= 0 ? (", same tokens as cached: " + std::to_string(agree * 100) + "%").c_str()
                       : "");
      }
      std::fflush(stdout);
    }
    if (!save_out.empty()) {
      if (cached_out.empty()) throw Error("bench_decode: --save-out needs the cached mode");
      std::vector<int64_t> flat;
      for (auto& s : cached_out) flat.insert(flat.end(), s.begin(), s.end());
      write_safetensors(save_out, {{"out", ids_tensor(flat, count, len + 1)}}, meta);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
