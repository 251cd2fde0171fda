// The Trainer on held-out data and on a user's input: the anomaly check,
// held-out evaluation (decoded accuracy, or a language model's loss), answers
// by greedy or beam decoding, and a language model's continuation of a prompt.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "generation/decoding_methods.h"
#include "trainer/bleu.h"
#include "trainer/progress.h"
#include "trainer/token_kinds.h"
#include "trainer/eval_kinds.h"
#include "trainer/trainer.h"

namespace qkv::train {

real Trainer::check_anomalies() {
  DetectAnomalyGuard anomaly;
  model().eval();
  nn::TeacherForced f;
  if (text && family().objectives.text_pairs) {
    Generator g(cfg.seed ^ detail::kHeldoutMaskSalt);
    f = net_->forward_pairs(family().objectives.text_pairs(
        cfg, shape, text->heldout_batches(cfg.batch).front(), vocab, g));
  } else if (text) {
    f = net_->forward_text(text->heldout_batches(cfg.batch).front());
  } else {
    const PairSet& held = pairs->heldout();
    std::vector<Pair> batch;  // the first --batch held-out pairs
    held.batch(0, std::min<size_t>(held.size(), static_cast<size_t>(cfg.batch)), batch);
    f = net_->forward_pairs(batch);
  }
  Var loss = nn::cross_entropy(f.logits, f.targets, f.ignore_index);
  loss.backward();
  model().zero_grad();
  model().train();
  return loss.item();
}

EvalResult Trainer::evaluate() {
  if (const EvalKind& k = eval_kind(*this); k.evaluate) return k.evaluate(*this);
  if (!text) {
    EvalResult r = evaluate(pairs->heldout());
    r.unknown_tokens = unknown_heldout_tokens;
    return r;
  }
  NoGradGuard no_grad;
  model().eval();
  EvalResult r;
  r.kind = &eval_kind(*this);
  double total = 0;
  const std::vector<LMBatch> batches = text->heldout_batches(cfg.batch);
  Progress progress(phase, static_cast<int64_t>(batches.size()), "batches");
  // Another objective on text (bert's mlm) masks the held-out windows the
  // same way at every evaluation: a stream of its own, from the seed.
  const bool made = family().objectives.text_pairs != nullptr;
  Generator held_gen(cfg.seed ^ detail::kHeldoutMaskSalt);
  for (const LMBatch& b : batches) {
    progress.at(&b - batches.data());
    const nn::TeacherForced f =
        made ? net_->forward_pairs(family().objectives.text_pairs(cfg, shape, b, vocab, held_gen))
             : net_->forward_text(b);
    total += double(nn::cross_entropy(f.logits, f.targets, f.ignore_index).item()) *
             double(f.target_tokens);
    r.tokens += f.target_tokens;
    if (made) r.tokens_right += detail::argmax_hits(f);
  }
  r.loss = r.tokens ? total / double(r.tokens) : 0;
  if (made) r.made = family().objectives.made_targets;
  // Bits per byte: the same nats over the bytes of text the scored tokens
  // cover, in bits (for one-byte tokens, bytes == tokens and it is loss / ln 2).
  // Not for masked tokens: they are a sample of the text, each seen in context.
  r.bytes = made ? 0 : text->scored_heldout_bytes();
  r.bits_per_byte = r.bytes ? total / double(r.bytes) / std::log(2.0) : 0;
  r.unknown_tokens = unknown_heldout_tokens;
  model().train();
  return r;
}

EvalResult Trainer::evaluate(const PairSet& set, int64_t chunk) {
  EvalResult r;
  r.kind = &eval_kind(*this);
  std::vector<Seq> refs;
  double total_loss = 0;  // summed over the target tokens (and </s>) of the set
  int64_t loss_tokens = 0;
  // A long evaluation says how far it is, a line every ~10 s. Chunks are
  // bounded in tokens as well as in sequences, so that a set of long
  // sequences (one chunk of 500 pairs of 1,000 tokens runs for minutes) still
  // reaches a line: at most kEvalChunkTokens source and target tokens a chunk.
  chunk = eval_chunk(chunk, set.longest_pair() + 2);  // with <s> and </s>
  Progress progress(phase, static_cast<int64_t>(set.size()), "sequences");
  // One chunk's pairs and sources, kept from chunk to chunk: a set of images
  // is read from its bytes into them, allocating nothing once they have grown.
  std::vector<Pair> batch;
  std::vector<Seq> sources;
  for (size_t i = 0; i < set.size(); i += static_cast<size_t>(chunk)) {
    progress.at(static_cast<int64_t>(i));
    const size_t end = std::min(set.size(), i + static_cast<size_t>(chunk));
    set.batch(i, end, batch);
    sources.resize(end - i);
    for (size_t k = i; k < end; ++k)
      sources[k - i].assign(batch[k - i].src.begin(), batch[k - i].src.end());
    std::vector<Seq> pred = answer(sources);
    {  // Teacher-forced cross-entropy of the expected answers, for the perplexity.
      NoGradGuard no_grad;
      const bool was_training = model().is_training();
      model().eval();  // no dropout
      const nn::TeacherForced f = net_->forward_pairs(batch);
      total_loss += double(nn::cross_entropy(f.logits, f.targets, f.ignore_index).item()) *
                    double(f.target_tokens);
      loss_tokens += f.target_tokens;
      if (was_training) model().train();
    }
    for (size_t k = i; k < end; ++k) {
      const Seq& want = batch[k - i].tgt;
      const Seq& got = pred[k - i];
      r.sequences++;
      r.exact += got == want;
      // Token accuracy: position by position over the expected answer and
      // its </s>; a missing or wrong token counts as wrong. The encoder model
      // gives one label per source token and a classifier one per input, and
      // no </s>: their labels alone count.
      const size_t scored = want.size() + (family().reads.labels_tokens || classifies() ? 0 : 1);
      for (size_t j = 0; j < scored; ++j) {
        const int64_t w = j < want.size() ? want[j] : Vocab::kEos;
        const int64_t p = j < got.size() ? got[j] : (j == got.size() ? Vocab::kEos : -1);
        r.tokens++;
        r.tokens_right += p == w;
      }
      r.predictions.push_back(got);
      refs.push_back(want);
    }
  }
  r.loss = loss_tokens ? total_loss / double(loss_tokens) : 0;
  r.bleu = corpus_bleu(r.predictions, refs);
  return r;
}

void Trainer::check_source_fits(size_t n) const {
  // The model reads the source and an answer at least one token long.
  const int64_t T = net_->positions_to_answer(static_cast<int64_t>(n), 1);
  const int64_t table = net_->max_positions();
  if (table > 0 && T > table)
    throw Error("the input has " + std::to_string(n) +
                " tokens; this model's position table holds " + std::to_string(table) +
                (T > static_cast<int64_t>(n) ? " (the input and its answer together)" : ""));
  // Every layer's attention keeps (H, T, T) probabilities (and the decoder's
  // cross-attention against an answer up to as long).
  const double bytes =
      4.0 * 3 * double(cfg.layers) * double(cfg.heads) * double(T + 2) * double(T + 2);
  if (bytes > 0.5 * detail::physical_memory_bytes())
    throw Error("the input has " + std::to_string(n) + " tokens; its attention maps need about " +
                detail::gib(bytes) + ", more than half of this machine's " +
                detail::gib(detail::physical_memory_bytes()));
}

void Trainer::check_report_fits(int64_t chunk, int64_t longer) const {
  if (!pairs || pairs->heldout().empty()) return;  // a language model evaluates --batch at a time
  // The final report's evaluate(set, chunk): the answers, then one
  // teacher-forced pass over `chunk` pairs at a time, in which each attention
  // layer in turn holds its numbers for all of them (no gradient: one layer's
  // at a time). The longest pair sets T (queries) and S (keys).
  int64_t src = pairs->heldout().longest_source(), tgt = pairs->heldout().longest_target();
  if (!pairs->from_file())  // the longer set
    src = tgt = std::max(src, longer > 0 ? longer : cfg.max_len + 3);
  // Images: the sequence is the model's patches and class token, not the pixels.
  if (family().reads.images) src = tgt = net_->max_positions();
  const auto [T, S] = attention_lengths(family(), src, tgt);  // queries, keys
  // As many pairs at a time as evaluate(set, chunk) takes.
  const int64_t n = std::min<int64_t>(eval_chunk(chunk, pairs->heldout().longest_pair() + 2),
                                      static_cast<int64_t>(pairs->heldout().size()));
  const detail::AttentionNumbers a = detail::attention_numbers(cfg, n, T, S);
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  const double W = double(std::max(cfg.d_model, cfg.d_ff)), V = double(vocab.size());
  const double numbers = double(n) * double(T) * a.kept_per_query + threads * a.per_thread +
                         double(n) * double(T + S) * 16 * W + 2 * double(n) * double(T) * V;
  const double bytes = numbers * double(sizeof(real)), have = detail::physical_memory_bytes();
  if (bytes > 0.8 * have)
    throw Error("the final report evaluates the held-out pairs " + std::to_string(n) +
                " at a time, up to " + std::to_string(T) + " tokens long: with --attention " +
                cfg.attention + " that needs about " + detail::gib(bytes) +
                ", more than this machine's " + detail::gib(have) +
                " (shorter sequences, a smaller model, or --attention memory-efficient, fit)");
}

void Trainer::check_decoding() const {
  if (!nn::decoding_method(decoding.method, "--decode").needs_search ||
      nn::can_beam_search(model()))
    return;
  throw Error("--decode " + brief(decoding.method) + ": " +
              (*family().answers.no_beam
                   ? std::string(family().answers.no_beam)
                   : "beam search here is for the encoder-decoder (--model seq2seq)"));
}

std::vector<Seq> Trainer::answer(const std::vector<Seq>& sources) {
  if (continues_text())
    throw Error("answer: a language model continues text; it has no source to answer");
  check_decoding();
  int64_t longest = 0;
  for (const Seq& s : sources) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  if (pairs) longest = std::max(longest, pairs->heldout().longest_target());
  if (cfg.data.empty()) longest = std::max(longest, cfg.max_len);
  // Without the data (--ask on a checkpoint or model file), answers may be as
  // long as the longest sequence trained on (the position table).
  if (!pairs && !cfg.data.empty()) longest = std::max(longest, cfg.context);
  nn::AnswerOptions o;
  o.method = decoding.method;
  o.beam = decoding.beam;
  o.alpha = decoding.alpha;
  o.use_cache = decoding.cache;
  o.max_new_tokens = longest + 2;
  o.bos = Vocab::kBos;
  o.eos = Vocab::kEos;
  o.pad = Vocab::kPad;
  return nn::answer(model(), sources, o);
}

Seq Trainer::continue_text(const Seq& prompt, int64_t n, nn::SampleOptions opt, Generator& gen) {
  if (!family().answers.sample)
    throw Error("continue_text: needs the decoder-only model (--model gpt)");
  if (prompt.empty()) throw Error("continue_text: the prompt is empty");
  // The model sees at most `context` tokens (its position table): the whole
  // prompt when it fits, else its last `context` tokens (prompt_cut says so).
  // Generation fills the table, then slides: the last half of the window
  // becomes the prompt of the next block (the cache is rebuilt from it), so
  // every token is drawn with at least context/2 tokens before it.
  const int64_t W = cfg.context;
  Seq seq(prompt.end() - std::min<int64_t>(W, static_cast<int64_t>(prompt.size())), prompt.end());
  // Never <pad> or <s> (a language model's text has neither), nor </s> when
  // the model does not stop at it.
  opt.suppress = {Vocab::kPad, Vocab::kBos};
  if (!opt.eos) opt.suppress.push_back(Vocab::kEos);
  Seq out;
  net_->eval();
  while (static_cast<int64_t>(out.size()) < n) {
    const int64_t keep = std::min<int64_t>(static_cast<int64_t>(seq.size()),
                                           out.empty() ? W : std::max<int64_t>(1, W / 2));
    const Seq window(seq.end() - keep, seq.end());
    opt.max_new_tokens = std::min<int64_t>(n - static_cast<int64_t>(out.size()), W - keep + 1);
    const Seq more = family().answers.sample(*net_, window, opt, gen);
    out.insert(out.end(), more.begin(), more.end());
    seq.insert(seq.end(), more.begin(), more.end());
    if (more.empty() || (opt.eos && more.back() == *opt.eos)) break;
  }
  net_->train();
  return out;
}

Seq Trainer::encode_text(const std::string& s, int64_t* unknown) const {
  const TokenKind& kind = run_token_kind(cfg);
  auto plain = [&](const std::string& piece, Seq& out) {
    const Seq ids = kind.encode(vocab, piece, unknown);
    out.insert(out.end(), ids.begin(), ids.end());
  };
  // T5's sentinels ("a <extra_id_0> day", span corruption) are tokens of
  // their own where the vocabulary has them; the text between is cut as usual.
  Seq out;
  size_t at = 0, from = 0;
  // A sentinel's name is short ("<extra_id_99>"): the '>' is looked for in
  // the next few bytes only, so a long text of "<extra_id_" without one
  // stays linear.
  constexpr size_t kLongestName = 24;
  while ((at = s.find("<extra_id_", at)) != std::string::npos) {
    const size_t close = s.find('>', at);
    const int64_t id = close == std::string::npos || close - at > kLongestName
                           ? -1
                           : vocab.find(std::string_view(s).substr(at, close - at + 1));
    if (id < 0) {  // not a sentinel of this vocabulary: plain text
      ++at;
      continue;
    }
    plain(s.substr(from, at - from), out);
    out.push_back(id);
    at = from = close + 1;
  }
  plain(s.substr(from), out);
  return out;
}
std::string Trainer::decode_text(const Seq& ids) const {
  return run_token_kind(cfg).decode(vocab, ids);  // BPE: bytes, exactly (not always UTF-8)
}

}  // namespace qkv::train
