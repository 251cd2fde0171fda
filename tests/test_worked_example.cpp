// The numbers examples/worked_example prints, the derivation pages' worked
// examples: each pinned to values worked on paper in the comments, for the
// engine and for the by-hand loops alike, and the finite differences beside them.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "check_mat.h"
#include "examples/worked_bert.h"
#include "examples/worked_gqa.h"
#include "examples/worked_moe.h"
#include "examples/worked_relative_bias.h"
#include "examples/worked_swiglu.h"
#include "examples/worked_vit.h"

using namespace qkv;
using namespace qkv::step;
using qkv::testing::check_mat;

namespace {

// The engine (float32) within 1e-5 of the paper, by hand (double) within 1e-6.
void worked_both(const Mat& engine, const Mat& by_hand, const std::vector<double>& want,
                 const char* what) {
  check_mat(engine, want, 1e-5, what);
  check_mat(by_hand, want, 1e-6, what);
}

}  // namespace

TEST_CASE(
    "worked example, moe (docs/moe-backward.md): 4 tokens route top 2 of 3 experts, expert 0 "
    "overflows its 3 places, and dL/dl = (dg_a - dg_b) g_a g_b, engine, by hand and fin.diff") {
  // Token 0's P = softmax([2, 1, 0.1]) = [0.659001, 0.242433, 0.098566]. With two
  // chosen, g_a = p_a / (p_a + p_b) = sigmoid(l_a - l_b): tokens 0, 1 and 3 pick
  // logits 1 apart, g = sigmoid(1) = 0.731059 and 0.268941; token 2's are 0.2
  // apart, sigmoid(0.2) = 0.549834 and 0.450166.
  const MoEPass p = moe_pass();
  const MoEByHand h = moe_by_hand(moe_logits());
  check_mat(h.P,
            {0.659001, 0.242433, 0.098566, 0.253716, 0.689672, 0.056612, 0.489749, 0.109278,
             0.400973, 0.220409, 0.180456, 0.599135},
            1e-6, "P");
  check_mat(to_mat(p.P.data()), h.P.a, 1e-6, "P (engine)");
  check_mat(h.g, {0.731059, 0.268941, 0.731059, 0.268941, 0.549834, 0.450166, 0.731059, 0.268941},
            1e-6, "g");
  // Choices: 0 -> (0, 1), 1 -> (1, 0), 2 -> (0, 2), 3 -> (2, 0). Capacity
  // ceil(1.0 * 4 * 2 / 3) = 3. First choices in token order: e0 gets 0, e1 gets 1,
  // e0 gets 2, e2 gets 3; then second choices: e1 gets 0, e0 gets 1 (its third
  // place), e2 gets 2, and token 3's second choice (e0) finds e0 full: dropped.
  CHECK(h.capacity == 3);
  CHECK(p.routing->capacity == 3);
  CHECK(p.routing->dropped == 1);
  const std::vector<std::vector<int>> rows{{0, 2, 1}, {1, 0}, {3, 2}};
  CHECK(h.rows == rows);
  for (int e = 0; e < 3; ++e)
    CHECK(std::vector<int>(p.routing->rows[e].begin(), p.routing->rows[e].end()) == rows[e]);
  CHECK(h.kept[3] == std::vector<int>{1, 0});
  // y_n = sum over kept of g (e + 1): 0.731059 + 2 (0.268941) = 1.268941;
  // 2 (0.731059) + 0.268941 = 1.731059; 0.549834 + 3 (0.450166) = 1.900332;
  // token 3 keeps expert 2 only: 3 (0.731059) = 2.193176 (not renormalised to 3).
  worked_both(p.y_token, h.y, {1.268941, 1.731059, 1.900332, 2.193176}, "y");
  // L_n = dg_b + (dg_a - dg_b) g_a with g_a = sigmoid(l_a - l_b), so
  // dL/dl_a = (dg_a - dg_b) g_a g_b = -dL/dl_b, and 0 for the third expert.
  // g_a g_b = 0.196612 (logits 1 apart), 0.247516 (0.2 apart). dg = e + 1, 0 if dropped:
  // token 0: (1 - 2) 0.196612; token 1: (2 - 1) 0.196612 on expert 1;
  // token 2: (1 - 3) 0.247516 = -0.495033 on expert 0; token 3: (3 - 0) 0.196612 on expert 2.
  const std::vector<double> dl{-0.196612, 0.196612, 0,        -0.196612, 0.196612, 0,
                               -0.495033, 0,        0.495033, -0.589836, 0,        0.589836};
  worked_both(p.dl, h.dl, dl, "dl");
  check_mat(hand::central_difference(moe_loss_by_hand, moe_logits()), dl, 1e-6, "dl (fin.diff)");
  // dP = (dg - sum_i dg_i g_i) / S: token 3, S = 0.599135 + 0.220409 = 0.819544,
  // sum = 3 (0.731059) = 2.193176: dP_2 = 0.806824 / S = 0.984479, dP_0 = -2.193176 / S
  // = -2.676092.
  check_mat(p.dP, h.dP.a, 1e-5, "dP");
  CHECK(std::fabs(h.dP(3, 2) - 0.984479) < 1e-6);
  CHECK(std::fabs(h.dP(3, 0) + 2.676092) < 1e-6);
}

TEST_CASE(
    "worked example, relative bias (docs/relative-bias-backward.md): T5's buckets by the library "
    "and by hand agree, and dtable is the sum of dZ over each bucket's pairs, engine, by hand and "
    "fin.diff") {
  // 32 buckets, max distance 128. Encoder: 16 per direction, 8 exact; bucket 8 + m
  // starts at 8 * 16^(m/8): 8, 11.3, 16, 22.6, 32, 45.3, 64, 90.5, so distances
  // 12-15 are bucket 9, 16-22 bucket 10, 64-90 bucket 14, 91 on bucket 15; a
  // later key adds 16. Decoder: 32 buckets, 16 exact; bucket 16 + m starts at
  // 16 * 8^(m/16): 16, 18.2, 20.7, ..., so distance 20 is bucket 17.
  struct Row {
    int64_t rel, encoder, decoder;
  };
  for (const Row& r : {Row{-200, 15, 31}, Row{-64, 14, 26}, Row{-20, 10, 17}, Row{-16, 10, 16},
                       Row{-12, 9, 12}, Row{-8, 8, 8}, Row{-7, 7, 7}, Row{0, 0, 0}, Row{1, 17, 0},
                       Row{12, 25, 0}, Row{91, 31, 0}, Row{90, 30, 0}}) {
    CAPTURE(r.rel);
    CHECK(nn::relative_position_bucket(r.rel, true, 32, 128) == r.encoder);
    CHECK(bucket_by_hand(r.rel, true, 32, 128) == r.encoder);
    CHECK(nn::relative_position_bucket(r.rel, false, 32, 128) == r.decoder);
    CHECK(bucket_by_hand(r.rel, false, 32, 128) == r.decoder);
  }
  for (int64_t rel = -300; rel <= 300; ++rel)
    for (bool bi : {true, false})
      CHECK(nn::relative_position_bucket(rel, bi, 32, 128) == bucket_by_hand(rel, bi, 32, 128));
  // The gradient: 12 positions, so rel -11 .. 11. Bucket 0 holds the 12 pairs
  // of the diagonal, bucket 8 the 4 + 3 + 2 + 1 = 10 pairs at rel -8 .. -11.
  const RelativeBiasPass p = relative_bias_pass();
  const RelativeBiasByHand h = relative_bias_by_hand(Mat(1, kRelBuckets));
  CHECK(h.pairs(0, 0) == 12);
  CHECK(h.pairs(0, 8) == 10);
  CHECK(h.pairs(0, 24) == 10);
  CHECK(h.pairs(0, 16) == 0);
  check_mat(p.dtable, h.dtable.a, 1e-6, "dtable");
  check_mat(hand::central_difference([](const Mat& t) { return relative_bias_by_hand(t).L; },
                                     Mat(1, kRelBuckets)),
            h.dtable.a, 1e-8, "dtable (fin.diff)");
  // Each row of dZ sums to 0 (softmax), and each pair is in one bucket: dtable sums to 0.
  double total = 0;
  for (double v : h.dtable.a) total += v;
  CHECK(std::fabs(total) < 1e-12);
  CHECK(p.dtable(0, 16) == 0);             // no pair in bucket 16: the engine adds nothing there
  CHECK(std::fabs(h.dtable(0, 8)) > 0.1);  // the shared bucket gets a gradient of its own
}

TEST_CASE(
    "worked example, swiglu (docs/swiglu-backward.md): one row's a, u, silu, h, y and dx, engine, "
    "by hand and fin.diff") {
  // x = [1, -1]. a = x Wg^T = [1 - 0.5, -1 - 2] = [0.5, -3]; u = x Wu^T = [2 - 1, 1 + 1] = [1, 2].
  // sigmoid(0.5) = 0.622459, sigmoid(-3) = 0.047426: silu(a) = [0.311230, -0.142278],
  // h = silu(a) * u = [0.311230, -0.284555]; y = h Wd^T = [0.311230, 0.155615 + 0.284555].
  // dh = [1, 1] Wd = [1.5, -1]; silu'(a) = s (1 + a (1 - s)) = [0.739961, -0.088104];
  // da = dh * u * silu'(a) = [1.109941, 0.176209]; du = dh * silu(a) = [0.466845, 0.142278];
  // dx = da Wg + du Wu = [1.109941 - 0.176209 + 0.933690 + 0.142278,
  //                       0.554971 + 0.352417 + 0.466845 - 0.142278] = [2.009700, 1.231955].
  const SwiGLUExample ex = swiglu_example();
  const SwiGLUByHand h = swiglu_by_hand(ex);
  const SwiGLUPass p = swiglu_pass(ex);
  check_mat(h.a, {0.5, -3}, 1e-12, "a");
  check_mat(h.u, {1, 2}, 1e-12, "u");
  check_mat(h.silu, {0.311230, -0.142278}, 1e-6, "silu");
  check_mat(h.dsilu, {0.739961, -0.088104}, 1e-6, "silu'");
  worked_both(p.y, h.y, {0.311230, 0.440170}, "y");
  worked_both(p.dx, h.dx, {2.009700, 1.231955}, "dx");
  check_mat(swiglu_fd(ex), h.dx.a, 1e-8, "dx (fin.diff)");
}

TEST_CASE(
    "worked example, gqa (docs/gqa-backward.md): 4 query heads share 2 key/value heads, and a "
    "shared head's dK and dV are the sums of its group's two contributions, engine, by hand and "
    "fin.diff") {
  // Query head 0, row 0: q = [0.5, -1] against K_0's rows [1, 0], [0, 1], [-1, 0.5]: scores
  // [0.5, -1, -1] / sqrt 2; P = [1, e, e] / (1 + 2e), e = exp(-1.5 / sqrt 2) = 0.346227:
  // [0.590858, 0.204571, 0.204571].
  const GqaExample ex = gqa_example();
  const GqaByHand h = gqa_by_hand(ex);
  const GqaPass p = gqa_pass(ex);
  check_mat(
      h.P[0],
      {0.590858, 0.204571, 0.204571, 0.501929, 0.352448, 0.145623, 0.091149, 0.374920, 0.533931},
      1e-6, "P_0");
  // dV_h' = P_h^T dO_h. dO_0 = [[1, 0], [0, -1], [1, 1]]: column 0 is P_0's rows 0 + 2,
  // [0.682007, 0.579491, 0.738502]; column 1 its rows 2 - 1, [-0.410779, 0.022472, 0.388308].
  // dO_1 = [[0, 1], [1, 0], [0, -1]]: column 0 is P_1's row 1, [0.611202, 0.301364, 0.087434];
  // column 1 its rows 0 - 2, [0.355713, 0.022170, -0.377883].
  worked_both(p.dVh[0], h.dVh[0], {0.682007, -0.410779, 0.579491, 0.022472, 0.738502, 0.388308},
              "dV_0'");
  worked_both(p.dVh[1], h.dVh[1], {0.611202, 0.355713, 0.301364, 0.022170, 0.087434, -0.377883},
              "dV_1'");
  // dK_h' = dZ_h^T Q_h / sqrt 2. Head 0's row 0 of dP = dO_0 V_0^T is [1, 0, 2], and
  // <dP, P> = 0.590858 + 2 (0.204571) = 1, so dZ_0[0, 0] = 0; its column 0 is
  // [0, 0.640350, -0.190016]: dK_0'[0] = (0.640350 [1, 0.5] - 0.190016 [-1, 1]) / sqrt 2
  // = [0.587158, 0.092036].
  worked_both(p.dKh[0], h.dKh[0], {0.587158, 0.092036, -0.479589, -0.092646, -0.107569, 0.000610},
              "dK_0'");
  worked_both(p.dKh[1], h.dKh[1], {-0.036415, 0.359450, 0.037759, -0.280657, -0.001344, -0.078792},
              "dK_1'");
  // The shared head's gradient is the sum: dK_0 = dK_0' + dK_1', dV_0 = dV_0' + dV_1'.
  worked_both(hand::columns(p.dK, 0, 2), hand::columns(h.dK, 0, 2),
              {0.550743, 0.451486, -0.441830, -0.373304, -0.108913, -0.078183}, "dK_0");
  worked_both(hand::columns(p.dV, 0, 2), hand::columns(h.dV, 0, 2),
              {1.293209, -0.055066, 0.880855, 0.044642, 0.825936, 0.010425}, "dV_0");
  for (int64_t g = 0; g < 2; ++g) {  // the engine's two ways agree: kv_heads = 2 and copies
    check_mat(hand::columns(p.dK, 2 * g, 2), hand::plus(p.dKh[2 * g], p.dKh[2 * g + 1]).a, 1e-6,
              "dK");
    check_mat(hand::columns(p.dV, 2 * g, 2), hand::plus(p.dVh[2 * g], p.dVh[2 * g + 1]).a, 1e-6,
              "dV");
  }
  check_mat(p.dK, h.dK.a, 1e-6, "dK (engine)");
  check_mat(p.dV, h.dV.a, 1e-6, "dV (engine)");
  const Mat fd = gqa_fd(ex);
  check_mat(hand::columns(fd, 0, 4), h.dK.a, 1e-8, "dK (fin.diff)");
  check_mat(hand::columns(fd, 4, 4), h.dV.a, 1e-8, "dV (fin.diff)");
  check_mat(gqa_fd_copy(ex, 1, false), h.dKh[1].a, 1e-8, "dK_1' (fin.diff of head 1's copy)");
  check_mat(gqa_fd_copy(ex, 0, true), h.dVh[0].a, 1e-8, "dV_0' (fin.diff of head 0's copy)");
}

TEST_CASE(
    "worked example, bert (docs/bert-backward.md): mask_for_mlm's 80/10/10 rule by the library "
    "and by hand, and the masked loss's gradient, (p - onehot) / M on the chosen rows and exactly "
    "0 "
    "on the others, engine, by hand and fin.diff") {
  // Row [1, 4, 6, 5, 6, 4, 5, 2]: positions 1 to 6 are words, round(0.5 x 6) = 3 are chosen.
  // Seed 98 draws position 1 first (u = 0.9447 >= 0.9: unchanged), then 4 (u = 0.8435: a
  // random word, 5), then 3 (u = 0.5322 < 0.8: [MASK]).
  const MlmByHand h = mlm_by_hand(mlm_row(), kMlmSeed);
  const MlmPass p = mlm_pass();
  const data::Seq src{1, 4, 6, 3, 5, 4, 5, 2}, tgt{0, 4, 0, 5, 6, 0, 0, 0};
  CHECK(h.src == src);
  CHECK(h.tgt == tgt);
  CHECK(p.masked.src == src);
  CHECK(p.masked.tgt == tgt);
  REQUIRE(h.draws.size() == 3);
  CHECK(h.draws[0].position == 1);
  CHECK(h.draws[0].u >= 0.9);
  CHECK(h.draws[1].position == 4);
  CHECK((h.draws[1].u >= 0.8 && h.draws[1].u < 0.9));
  CHECK(h.draws[2].position == 3);
  CHECK(h.draws[2].u < 0.8);
  // The rule by hand on other seeds and rates agrees with the library too.
  for (uint64_t seed = 1; seed < 40; ++seed) {
    Generator g(seed);
    const data::Pair lib = data::mask_for_mlm(mlm_row(), mlm_options(), g);
    const MlmByHand b = mlm_by_hand(mlm_row(), seed);
    CHECK(lib.src == b.src);
    CHECK(lib.tgt == b.tgt);
  }
  // logits[t, v] = sin(t + 2v). Row 1, target 4: sum_v exp(sin(1 + 2v)) = 9.183728,
  // p = exp(sin 9) / 9.183728 = 0.164423, -log p = 1.805315; row 3, target 5: p = 0.173372,
  // 1.752314; row 4, target 6: p = 0.087980, 2.430644. loss = (sum) / 3 = 1.996091.
  const MlmLossByHand l = mlm_loss_by_hand(mlm_logits(), h.tgt);
  CHECK(l.M == 3);
  CHECK(std::fabs(l.loss - 1.996091) < 1e-6);
  CHECK(std::fabs(p.loss - 1.996091) < 1e-5);
  // dlogits[1] = (p_1 - onehot(4)) / 3: [0.084199, 0.041797, 0.013912, 0.070014,
  // (0.164423 - 1) / 3 = -0.278526, 0.013353, 0.055250].
  const std::vector<double> row1{0.084199,  0.041797, 0.013912, 0.070014,
                                 -0.278526, 0.013353, 0.055250};
  Mat e1(1, 7), h1(1, 7);
  for (int64_t v = 0; v < 7; ++v) e1(0, v) = p.dlogits(1, v), h1(0, v) = l.dlogits(1, v);
  worked_both(e1, h1, row1, "dlogits[1]");
  check_mat(p.dlogits, l.dlogits.a, 1e-6, "dlogits (engine)");
  check_mat(mlm_fd(h.tgt), l.dlogits.a, 1e-8, "dlogits (fin.diff)");
  for (int64_t t :
       {0, 2, 5, 6,
        7})  // not chosen: the engine gives exactly 0 (by hand they are 0 by construction)
    for (int64_t v = 0; v < 7; ++v) {
      CHECK(p.dlogits(t, v) == 0);
    }
}

TEST_CASE(
    "worked example, vit (docs/vit-backward.md): a 2-channel 4 x 4 image in 2 x 2 patches, N = 4 "
    "(+1 class token), each patch flattened channel, row, column, by patch_gather and by hand; "
    "dE = dY^T patches, engine, by hand and fin.diff") {
  // N = (4/2)(4/2) = 4; the ViT adds the class token: 5 positions.
  CHECK(kVitN == 4);
  CHECK(vit_positions() == 5);
  const VitByHand h = vit_by_hand();
  const VitPass p = vit_pass();
  CHECK(p.N == 4);
  // Pixel (c, y, x) = c + y/10 + x/100. Patch 1 is (gy, gx) = (0, 1): columns 2, 3 of rows
  // 0, 1; channel 0's (0,2) (0,3) (1,2) (1,3), then channel 1's.
  check_mat(h.patches, {0.00, 0.01, 0.10, 0.11, 1.00, 1.01, 1.10, 1.11, 0.02, 0.03, 0.12,
                        0.13, 1.02, 1.03, 1.12, 1.13, 0.20, 0.21, 0.30, 0.31, 1.20, 1.21,
                        1.30, 1.31, 0.22, 0.23, 0.32, 0.33, 1.22, 1.23, 1.32, 1.33},
            1e-12, "patches");
  check_mat(vit_patches_by_library(), h.patches.a, 1e-6, "patches (patch_gather)");
  // dY = [[1, 0], [0, -1], [1, 0.5], [0.5, 1]]: dE[0] = patches[0] + patches[2] +
  // 0.5 patches[3], dE[1] = -patches[1] + 0.5 patches[2] + patches[3]. Column 5 (channel 1,
  // py 0, px 1): dE[0, 5] = 1.01 + 1.21 + 0.5 (1.23) = 2.835; dE[1, 5] = -1.03 + 0.605 +
  // 1.23 = 0.805. Column 0: 0 + 0.20 + 0.11 = 0.31 and -0.02 + 0.10 + 0.22 = 0.30.
  worked_both(p.dE, h.dE,
              {0.31, 0.335, 0.56, 0.585, 2.81, 2.835, 3.06, 3.085, 0.30, 0.305, 0.35, 0.355, 0.80,
               0.805, 0.85, 0.855},
              "dE");
  worked_both(p.db, h.db, {2.5, 0.5}, "db");
  check_mat(vit_fd(), h.dE.a, 1e-8, "dE (fin.diff)");
}
