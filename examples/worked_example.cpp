// worked_example: the derivation pages' worked examples, a few numbers each
// that a learner can follow by hand, printed as make step prints its parts
// (examples/step_through.cpp): each gradient by qkv's engine, by hand (plain
// loops in double, no qkv kernel) and, where it applies, by finite
// differences of the by-hand forward, side by side.
//
//   worked_example                    every page's example
//   worked_example --page moe         one page's: moe, relative-bias,
//                                     swiglu, gqa, bert, vit
//   worked_example --no-fd            skip the finite differences
//
// Each page quotes its example's numbers in a block marked
// <!-- quoted from: worked_example --page NAME -->, checked number by number
// by tests/cli/docs_quotes.sh. The computations live in examples/worked_*.h,
// one header per page; this file prints them.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/step_print.h"
#include "examples/worked_bert.h"
#include "examples/worked_gqa.h"
#include "examples/worked_moe.h"
#include "examples/worked_relative_bias.h"
#include "examples/worked_swiglu.h"
#include "examples/worked_vit.h"

namespace {

using namespace qkv;
using namespace qkv::step;

std::string list_text(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// ---- docs/moe-backward.md ----------------------------------------------------

void moe_page(bool with_fd) {
  banner("docs/moe-backward.md: 4 tokens, 3 experts, top 2");
  const Mat l = moe_logits();
  const MoEByHand h = moe_by_hand(l);
  const MoEPass p = moe_pass();
  const nn::MoERouting& r = *p.routing;
  std::printf(
      " P = softmax(l) over the experts; each token takes its 2 largest P and\n"
      " renormalises them, g = P / S with S their sum (nn/moe.h).\n\n"
      " token  router logits l     P = softmax(l)             top 2  gates g\n");
  for (int64_t n = 0; n < l.rows; ++n) {
    Mat g(1, 2);
    g.a = {h.g(n, 0), h.g(n, 1)};
    std::printf("   %lld    [%5.1f %5.1f %5.1f]  %s  %d, %d   %.4f %.4f\n", (long long)n, l(n, 0),
                l(n, 1), l(n, 2), row_text(h.P, n).c_str(), h.top[n][0], h.top[n][1], g(0, 0),
                g(0, 1));
  }
  std::printf(
      "\n Capacity (training steps): ceil(%.2f x 4 tokens x 2 / 3 experts) = %lld\n"
      " places per expert (qkv's default factor 1.25 would give 4). Choices claim\n"
      " places by rank, then token: every first choice in token order, then\n"
      " every second choice. A choice past capacity is dropped.\n\n"
      " expert  receives (claim order)   engine's routing (moe_route)\n",
      kMoeCapacityFactor, (long long)h.capacity);
  for (int64_t e = 0; e < l.cols; ++e) {
    std::vector<int> engine(r.rows[e].begin(), r.rows[e].end());
    std::printf("   %lld     tokens %-18s  tokens %s\n", (long long)e, list_text(h.rows[e]).c_str(),
                list_text(engine).c_str());
  }
  for (int64_t n = 0; n < l.rows; ++n)
    for (int k = 0; k < kMoeTopK; ++k)
      if (!h.kept[n][k])
        std::printf(
            " Dropped: token %lld's choice %d (expert %d): expert %d is full. Its gates\n"
            " stay as they were (renormalised before the drop): the token gets only\n"
            " %.4f x expert %d's output, and the residual connection carries the rest.\n",
            (long long)n, k + 1, h.top[n][k], h.top[n][k], h.g(n, 1 - k), h.top[n][1 - k]);
  std::printf(" Dropped by the engine: %lld (capacity %lld).\n", (long long)r.dropped,
              (long long)r.capacity);

  std::printf(
      "\n Each expert e stands for an FFN that multiplies its row by e + 1, and\n"
      " L = sum(y), so token n's output is y_n = sum over its kept choices of\n"
      " g (e + 1); x is one-hot (x = I), so l = x Wr^T = Wr^T, dl = dWr^T.\n");
  Gaps gaps;
  step_row("y_n = sum over kept choices of g_ne (e + 1)", "one number per token", h.y, p.y_token,
           nullptr, gaps);
  std::printf(
      "\n Backward from L = sum(y): dg = e + 1 for a kept choice, 0 for a dropped\n"
      " one; dP_j = (dg_j - sum_i dg_i g_i) / S on the two chosen; then softmax's\n"
      " backward dl = P * (dP - <dP, P>).\n");
  step_row("dP (4,3): 0 off the two chosen", "", h.dP, p.dP, nullptr, gaps);
  const Mat fd = with_fd ? hand::central_difference(moe_loss_by_hand, l) : Mat();
  step_row("dL/dl, the router logits", "engine: dWr^T", h.dl, p.dl, with_fd ? &fd : nullptr, gaps);
  print_gaps(gaps, with_fd);
}

// ---- docs/relative-bias-backward.md ------------------------------------------

// The distances at which a direction's buckets start, by hand: 0, 1, ...,
// nb/2 - 1, then the ceilings of the geometric ladder.
std::string ladder_text(int64_t nb) {
  std::string s;
  for (int64_t m = 0; m < nb - nb / 2; ++m)
    s += (m ? " " : "") +
         std::to_string(static_cast<long long>(std::ceil(bucket_start(m, nb, kRelMaxDistance))));
  return s;
}

void relative_bias_page(bool with_fd) {
  banner("docs/relative-bias-backward.md: T5's buckets, and the table's gradient");
  std::printf(
      " rel = key position - query position; %lld buckets, maximum distance %lld\n"
      " (qkv's defaults). An encoder is bidirectional: %lld buckets per direction,\n"
      " the first %lld exact. A decoder (or a GPT) is causal: %lld buckets for the\n"
      " keys before the query, the first %lld exact. Library:\n"
      " nn::relative_position_bucket; by hand: the ladder below.\n\n"
      "    rel     encoder           decoder\n"
      "            library  by hand  library  by hand\n",
      (long long)kRelBuckets, (long long)kRelMaxDistance, (long long)kRelBuckets / 2,
      (long long)kRelBuckets / 4, (long long)kRelBuckets, (long long)kRelBuckets / 2);
  int64_t differ = 0;
  for (int64_t rel : relative_positions()) {
    const int64_t el = nn::relative_position_bucket(rel, true, kRelBuckets, kRelMaxDistance);
    const int64_t eh = bucket_by_hand(rel, true, kRelBuckets, kRelMaxDistance);
    const int64_t dl = nn::relative_position_bucket(rel, false, kRelBuckets, kRelMaxDistance);
    const int64_t dh = bucket_by_hand(rel, false, kRelBuckets, kRelMaxDistance);
    differ += (el != eh) + (dl != dh);
    std::printf("   %5lld     %4lld     %4lld     %4lld     %4lld\n", (long long)rel, (long long)el,
                (long long)eh, (long long)dl, (long long)dh);
  }
  std::printf(
      " Library and by hand differ on %lld of them. By hand, bucket nb/2 + m of a\n"
      " direction's nb starts at distance (nb/2) (%lld / (nb/2))^(m / (nb/2)):\n"
      "   encoder, buckets 8 to 15 start at distances\n"
      "     %s\n"
      "   decoder, buckets 16 to 31 at\n"
      "     %s\n"
      " and a later key adds 16 in the encoder (its upper half).\n",
      (long long)differ, (long long)kRelMaxDistance, ladder_text(kRelBuckets / 2).c_str(),
      ladder_text(kRelBuckets).c_str());

  const RelativeBiasPass p = relative_bias_pass();
  const Mat table(1, kRelBuckets);
  const RelativeBiasByHand h = relative_bias_by_hand(table);
  std::printf(
      "\n The gradient. One head of an encoder's self-attention over T = %lld\n"
      " positions, x_t = [cos t, sin t], every projection the identity (Q = K =\n"
      " V = x), the table all zeros, L = sum over t of out[t, 0]. Each score\n"
      " (i, j) adds table[bucket(j - i)], so by the sum rule\n"
      "   dtable[k] = sum of dZ[i, j] over the pairs (i, j) in bucket k\n"
      " Engine: the fused multi_head_attention's backward; by hand: P, dZ and\n"
      " the sum over each bucket's pairs in plain loops.\n",
      (long long)kRelT);
  // A few buckets: rel 0 (12 pairs), -1 and +1 (11 each), and the first
  // shared buckets, 8 (rel -8 .. -11) and 24 (rel 8 .. 11), 10 pairs each.
  const std::vector<int64_t> shown{0, 1, 17, 8, 24};
  auto pick = [&](const Mat& m) {
    Mat r(1, static_cast<int64_t>(shown.size()));
    for (size_t i = 0; i < shown.size(); ++i) r.a[i] = m(0, shown[i]);
    return r;
  };
  std::string pairs;
  for (int64_t k : shown)
    pairs += " " + std::to_string(k) + " (" + std::to_string((long long)h.pairs(0, k)) + ")";
  std::printf(" Buckets (pairs):%s\n", pairs.c_str());
  Gaps gaps;
  Mat fd;
  if (with_fd)
    fd = hand::central_difference([](const Mat& t) { return relative_bias_by_hand(t).L; }, table);
  const Mat fd_shown = with_fd ? pick(fd) : Mat();
  step_row("dtable[k], k = 0, 1, 17, 8, 24", "rel 0, -1, +1, -8..-11, +8..+11", pick(h.dtable),
           pick(p.dtable), with_fd ? &fd_shown : nullptr, gaps);
  gaps.engine = std::max(gaps.engine, max_gap(p.dtable, h.dtable));
  if (with_fd) gaps.fd = std::max(gaps.fd, max_gap(h.dtable, fd));
  double total = 0;
  for (double v : h.dtable.a) total += v;
  std::printf(
      "\n   Over all 32 buckets, sum of dtable = %.4f: each row of dZ sums to 0\n"
      "   (softmax ignores a shift of its row), and every pair is in one bucket.\n"
      "   Bucket 16 (rel > 0 at distance 0) has no pair: the engine's dtable[16]\n"
      "   = %.4f.\n",
      std::fabs(total) < 5e-5 ? 0.0 : total, p.dtable(0, 16) + 0.0);
  print_gaps(gaps, with_fd);
}

// ---- docs/swiglu-backward.md --------------------------------------------------

void swiglu_page(bool with_fd) {
  banner("docs/swiglu-backward.md: one row through SwiGLU");
  const SwiGLUExample ex = swiglu_example();
  const SwiGLUByHand h = swiglu_by_hand(ex);
  const SwiGLUPass p = swiglu_pass(ex);
  std::printf(
      " x = [1, -1] (D = 2), hidden width F = 2, L = sum(y):\n"
      "   Wg = [[1, 0.5], [-1, 2]]   Wu = [[2, 1], [1, -1]]   Wd = [[1, 0], [0.5, -1]]\n"
      " By hand, the row's pieces:\n");
  auto line = [](const char* label, const Mat& m) {
    std::printf("   %-32s %s\n", label, row_text(m, 0).c_str());
  };
  line("a = x Wg^T (the gate)", h.a);
  line("u = x Wu^T (up)", h.u);
  line("sigmoid(a)", h.s);
  line("silu(a) = a sigmoid(a)", h.silu);
  line("h = silu(a) * u", h.h);
  Gaps gaps;
  step_row("y = h Wd^T", "", h.y, p.y, nullptr, gaps);
  std::printf("\n Backward from dy = [1, 1]:\n");
  line("dh = dy Wd", h.dh);
  line("silu'(a) = s (1 + a (1 - s))", h.dsilu);
  line("da = dh * u * silu'(a)", h.da);
  line("du = dh * silu(a)", h.du);
  const Mat fd = with_fd ? swiglu_fd(ex) : Mat();
  step_row("dx = da Wg + du Wu", "both projections read x", h.dx, p.dx, with_fd ? &fd : nullptr,
           gaps);
  print_gaps(gaps, with_fd);
}

// ---- docs/gqa-backward.md -----------------------------------------------------

void gqa_page(bool with_fd) {
  banner("docs/gqa-backward.md: 4 query heads share 2 key/value heads");
  const GqaExample ex = gqa_example();
  const GqaByHand h = gqa_by_hand(ex);
  const GqaPass p = gqa_pass(ex);
  std::printf(
      " H = 4 query heads, K = 2 key/value heads: a group of G = 2 each, query\n"
      " head h reads key/value head g = h / 2. T = S = 3, d_k = d_v = 2, D = 8;\n"
      " L = sum(out * dO), out = concat_h O_h. Group 0, query heads 0 and 1:\n");
  auto col = [&](const Mat& m, int64_t h) { return hand::columns(m, h * kGqaDk, kGqaDk); };
  side_by_side("Q_0", col(ex.Q, 0), "Q_1", col(ex.Q, 1));
  side_by_side("K_0 (shared by heads 0, 1)", gqa_key(ex.KV, 0), "V_0", gqa_value(ex.KV, 0));
  side_by_side("dO_0", col(ex.dO, 0), "dO_1", col(ex.dO, 1));
  side_by_side("P_0 = softmax(Q_0 K_0^T / sqrt 2)", h.P[0], "P_1 = softmax(Q_1 K_0^T / sqrt 2)",
               h.P[1]);
  std::printf(
      "\n Each query head's backward is attention's, with K_0 and V_0 in place of\n"
      " its own: dK_h' = dZ_h^T Q_h / sqrt 2, dV_h' = P_h^T dO_h. Engine, per\n"
      " head: kv_heads = 4, every query head given its own copy of K_0, V_0;\n"
      " fin.diff: of the by-hand L in that copy alone.\n");
  Gaps gaps;
  Mat fd[2][2];  // [value][head]
  for (int v = 0; v < 2 && with_fd; ++v)
    for (int64_t hd = 0; hd < 2; ++hd) fd[v][hd] = gqa_fd_copy(ex, hd, v == 1);
  const Mat fd_shared = with_fd ? gqa_fd(ex) : Mat();
  step_row("dK_0' from query head 0", "", h.dKh[0], p.dKh[0], with_fd ? &fd[0][0] : nullptr, gaps);
  step_row("dK_0' from query head 1", "", h.dKh[1], p.dKh[1], with_fd ? &fd[0][1] : nullptr, gaps);
  const Mat fdK0 = with_fd ? hand::columns(fd_shared, 0, kGqaDk) : Mat();
  step_row("dK_0 = the sum of the two", "engine: kv_heads = 2, the shared K_0",
           hand::columns(h.dK, 0, kGqaDk), hand::columns(p.dK, 0, kGqaDk),
           with_fd ? &fdK0 : nullptr, gaps);
  step_row("dV_0' from query head 0", "", h.dVh[0], p.dVh[0], with_fd ? &fd[1][0] : nullptr, gaps);
  step_row("dV_0' from query head 1", "", h.dVh[1], p.dVh[1], with_fd ? &fd[1][1] : nullptr, gaps);
  const Mat fdV0 = with_fd ? hand::columns(fd_shared, 2 * kGqaDk, kGqaDk) : Mat();
  step_row("dV_0 = the sum of the two", "", hand::columns(h.dV, 0, kGqaDk),
           hand::columns(p.dV, 0, kGqaDk), with_fd ? &fdV0 : nullptr, gaps);
  std::printf("\n Group 1 (query heads 2 and 3) likewise; all of dK and dV:\n");
  const Mat fdK = with_fd ? hand::columns(fd_shared, 0, 2 * kGqaDk) : Mat();
  const Mat fdV = with_fd ? hand::columns(fd_shared, 2 * kGqaDk, 2 * kGqaDk) : Mat();
  step_row("dK = [dK_0 dK_1]", "", h.dK, p.dK, with_fd ? &fdK : nullptr, gaps);
  step_row("dV = [dV_0 dV_1]", "", h.dV, p.dV, with_fd ? &fdV : nullptr, gaps);
  for (int64_t hd = 2; hd < kGqaHeads; ++hd)
    gaps.engine =
        std::max({gaps.engine, max_gap(p.dKh[hd], h.dKh[hd]), max_gap(p.dVh[hd], h.dVh[hd])});
  print_gaps(gaps, with_fd);
}

// ---- docs/bert-backward.md ----------------------------------------------------

std::string ids_text(const data::Seq& ids) {
  std::string s;
  for (int64_t id : ids) s += "  " + std::to_string(static_cast<long long>(id));
  return s;
}

void bert_page(bool with_fd) {
  banner("docs/bert-backward.md: the 80/10/10 rule, and the masked loss");
  const data::Seq ids = mlm_row();
  const MlmByHand h = mlm_by_hand(ids, kMlmSeed);
  const MlmPass p = mlm_pass();
  std::printf(
      " A vocabulary of V = 7: 0 <pad>, 1 <s>, 2 </s>, 3 [MASK], the words 4, 5,\n"
      " 6. Of the row's %zu words (positions 1 to 6), round(%.1f x %zu) = %zu are\n"
      " chosen (qkv's rate 0.15 would choose 1), by data::mask_for_mlm with\n"
      " seed %llu; by hand: the same Generator's draws, the rule in plain code.\n"
      " Each chosen position draws one u: u < 0.8 [MASK], u < 0.9 a random\n"
      " word, else it stays.\n\n"
      "   draw  position  id  u       becomes\n",
      h.choosable.size(), kMlmRate, h.choosable.size(), h.draws.size(),
      static_cast<unsigned long long>(kMlmSeed));
  for (size_t j = 0; j < h.draws.size(); ++j) {
    const MlmDraw& d = h.draws[j];
    const char* what = d.u < 0.8 ? "[MASK]" : d.u < 0.9 ? "a random word" : "unchanged";
    std::printf("    %zu       %lld      %lld   %.4f  %lld, %s\n", j + 1,
                static_cast<long long>(d.position), static_cast<long long>(ids[d.position]), d.u,
                static_cast<long long>(d.becomes), what);
  }
  int64_t differ = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    differ += (h.src[i] != p.masked.src[i]) + (h.tgt[i] != p.masked.tgt[i]);
  std::printf(
      "\n   position                   0  1  2  3  4  5  6  7\n"
      "   ids                     %s\n"
      "   masked, by hand         %s\n"
      "   masked, mask_for_mlm    %s\n"
      "   targets, by hand        %s\n"
      "   targets, mask_for_mlm   %s\n"
      " Library and by hand differ on %lld of them (0 in a target: kPad, not scored).\n",
      ids_text(ids).c_str(), ids_text(h.src).c_str(), ids_text(p.masked.src).c_str(),
      ids_text(h.tgt).c_str(), ids_text(p.masked.tgt).c_str(), static_cast<long long>(differ));

  const MlmLossByHand l = mlm_loss_by_hand(mlm_logits(), h.tgt);
  std::printf(
      "\n The model's output: logits[t, v] = sin(t + 2v), (8, 7). The loss is the\n"
      " mean over the M = %lld chosen rows c of -log softmax(logits_c)[y_c]\n"
      " (nn::cross_entropy, kPad ignored): by hand %.6f, engine %.6f.\n"
      " Backward: dlogits_c = (p_c - onehot(y_c)) / M on a chosen row; an\n"
      " unchosen row is in no term of the loss, so its gradient is exactly 0.\n",
      static_cast<long long>(l.M), l.loss, p.loss);
  Gaps gaps;
  const Mat fd = with_fd ? mlm_fd(h.tgt) : Mat();
  step_row("dlogits (rows 0 to 7, columns the ids 0 to 6)", "", l.dlogits, p.dlogits,
           with_fd ? &fd : nullptr, gaps);
  double unchosen = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < p.dlogits.rows; ++t)
    for (int64_t v = 0; v < p.dlogits.cols && h.tgt[t] == data::kPad; ++v, ++count)
      unchosen = std::max(unchosen, std::fabs(p.dlogits(t, v)));
  const int64_t c = h.draws[0].position, y = h.tgt[c];
  std::printf(
      "\n   Unchosen rows, the engine's largest |dlogits|: %g (of %lld numbers).\n"
      "   One chosen logit, dlogits[%lld, %lld] = (p - 1) / %lld, p = %.6f:\n"
      "     by hand %.6f   engine %.6f",
      unchosen, static_cast<long long>(count), static_cast<long long>(c), static_cast<long long>(y),
      static_cast<long long>(l.M), l.P(c, y), l.dlogits(c, y), p.dlogits(c, y));
  if (with_fd) std::printf("   fin.diff %.6f", fd(c, y));
  std::printf("\n");
  print_gaps(gaps, with_fd);
}

// ---- docs/vit-backward.md -----------------------------------------------------

// A row of pixel addresses, c + y/10 + x/100: " 0.00 0.01 ...".
std::string codes_text(const Mat& m, int64_t i) {
  std::string s;
  char buf[16];
  for (int64_t j = 0; j < m.cols; ++j) {
    std::snprintf(buf, sizeof buf, " %4.2f", m(i, j));
    s += buf;
  }
  return s;
}

void vit_page(bool with_fd) {
  banner("docs/vit-backward.md: an image's patches, their order, and dE");
  const Mat image = vit_image();
  const VitByHand h = vit_by_hand();
  const Mat lib = vit_patches_by_library();
  const VitPass p = vit_pass();
  std::printf(
      " An image of C = %lld channels, H = W = %lld pixels, patches of P = %lld:\n"
      " N = (H/P)(W/P) = (%lld/%lld)(%lld/%lld) = %lld patches (patch_embed's Y has %lld\n"
      " rows), and with the class token in front %lld positions (ViTConfig's\n"
      " patches() + 1: %lld). Pixel (c, y, x) holds its address c + y/10 + x/100\n"
      " (1.13: channel 1, row 1, column 3):\n\n"
      "   channel 0                channel 1\n",
      (long long)kVitC, (long long)kVitSide, (long long)kVitP, (long long)kVitSide,
      (long long)kVitP, (long long)kVitSide, (long long)kVitP, (long long)kVitN, (long long)p.N,
      (long long)kVitN + 1, (long long)vit_positions());
  for (int64_t y = 0; y < kVitSide; ++y)
    std::printf("  %s    %s\n", codes_text(image, y).c_str(),
                codes_text(image, kVitSide + y).c_str());
  std::printf(
      "\n Patch n = gy (W/P) + gx, the grid row-major; within a patch, channel,\n"
      " then row py, then column px: column (c P + py) P + px. By hand, each\n"
      " pixel sent to its row and column; library, nn::patch_gather:\n\n"
      "   n  (gy, gx)\n");
  int64_t differ = 0;
  for (int64_t n = 0; n < kVitN; ++n) {
    for (int64_t k = 0; k < kVitK; ++k)  // a copy: the same float, exactly
      differ += static_cast<real>(h.patches(n, k)) != static_cast<real>(lib(n, k));
    std::printf("   %lld  (%lld, %lld)   by hand %s\n               library %s\n", (long long)n,
                (long long)(n / (kVitSide / kVitP)), (long long)(n % (kVitSide / kVitP)),
                codes_text(h.patches, n).c_str(), codes_text(lib, n).c_str());
  }
  std::printf(
      " Library and by hand differ on %lld of the %lld entries.\n\n"
      " The projection Y = patches E^T + b, E (D, C*P*P) = (%lld, %lld), and\n"
      " L = sum(Y * dY) for a fixed dY (N, D):\n",
      (long long)differ, (long long)(kVitN * kVitK), (long long)kVitD, (long long)kVitK);
  const Mat dY = vit_dY();
  for (int64_t n = 0; n < kVitN; ++n)
    std::printf("   dY[%lld] = %s\n", (long long)n, row_text(dY, n).c_str());
  const int64_t k = 5;  // pixel (c 1, py 0, px 1) of each patch
  std::string terms;
  for (int64_t n = 0; n < kVitN; ++n) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%g x %.2f", n ? " + " : "", dY(n, 0), h.patches(n, k));
    terms += buf;
  }
  std::printf(
      "\n dE = dY^T patches: dE[d, k] = sum over the patches n of dY[n, d]\n"
      " patches[n, k]; one weight, k = %lld (pixel c 1, py 0, px 1 of each patch):\n"
      "   dE[0, %lld] = %s = %.4f\n",
      (long long)k, (long long)k, terms.c_str(), h.dE(0, k));
  Gaps gaps;
  const Mat fd = with_fd ? hand::transpose(vit_fd()) : Mat();
  step_row("dE^T (C*P*P, D): row k = pixel (c, py, px) of a patch", "", hand::transpose(h.dE),
           hand::transpose(p.dE), with_fd ? &fd : nullptr, gaps);
  step_row("db = column sums of dY", "", h.db, p.db, nullptr, gaps);
  print_gaps(gaps, with_fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"worked_example: the derivation pages' worked examples, engine beside by hand"};
  // The pages, in the order `all` prints them: each name once, here.
  struct Page {
    const char* name;
    void (*print)(bool with_fd);
  };
  const std::vector<Page> pages{{"moe", moe_page},       {"relative-bias", relative_bias_page},
                                {"swiglu", swiglu_page}, {"gqa", gqa_page},
                                {"bert", bert_page},     {"vit", vit_page}};
  std::vector<std::string> names;
  for (const Page& p : pages) names.push_back(p.name);
  names.push_back("all");
  const std::string choices = qkv::one_of(names, [](const std::string& n) { return n; });
  std::string page = "all";
  bool no_fd = false;
  app.add_option("--page", page, choices + " (default): docs/PAGE-backward.md's example")
      ->type_name("PAGE")
      ->check(CLI::Validator(
          [&](std::string& s) {
            return std::find(names.begin(), names.end(), s) != names.end()
                       ? std::string()
                       : "expected " + choices + ", got '" + qkv::brief(s) + "'";
          },
          "", "page"));
  app.add_flag("--no-fd", no_fd, "skip the finite differences");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const Page& p : pages)
      if (page == p.name || page == "all") p.print(!no_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worked_example: %s\n", e.what());
    return 1;
  }
  return 0;
}
