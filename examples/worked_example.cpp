// worked_example: the derivation pages' worked examples, a few numbers each
// that a learner can follow by hand, printed as make step prints its parts
// (examples/step_through.cpp): each gradient by qkv's engine, by hand (plain
// loops in double, no qkv kernel) and, where it applies, by finite
// differences of the by-hand forward, side by side.
//
//   worked_example                    every page's example
//   worked_example --page moe         one page's: moe, relative-bias
//   worked_example --no-fd            skip the finite differences
//
// Each page quotes its example's numbers in a block marked
// <!-- quoted from: worked_example --page NAME -->, checked number by number
// by tests/cli/docs_quotes.sh. The computations live in examples/worked_*.h,
// one header per page; this file prints them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/step_print.h"
#include "examples/worked_moe.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"worked_example: the derivation pages' worked examples, engine beside by hand"};
  std::string page = "all";
  bool no_fd = false;
  const std::vector<std::string> pages{"moe"};
  app.add_option("--page", page, "moe or all (default): docs/PAGE-backward.md's example")
      ->type_name("PAGE")
      ->check(CLI::Validator(
          [&](std::string& s) {
            for (const auto& p : pages)
              if (s == p) return std::string();
            return s == "all" ? std::string() : "expected moe or all, got '" + qkv::brief(s) + "'";
          },
          "", "page"));
  app.add_flag("--no-fd", no_fd, "skip the finite differences");
  CLI11_PARSE(app, argc, argv);
  try {
    if (page == "moe" || page == "all") moe_page(!no_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worked_example: %s\n", e.what());
    return 1;
  }
  return 0;
}
