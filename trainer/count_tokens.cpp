// --count-tokens (trainer/report.h): each split's sequences in tokens, as the
// model reads them, and how many exceed the window; nothing is trained.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "trainer/report.h"

namespace qkv::train {

void count_tokens(const Trainer& t, const RunOptions& o) {
  std::printf("qkv train --count-tokens: %s, %s tokens (vocabulary %lld)\n",
              brief(t.cfg.data).c_str(), t.cfg.tokens.c_str(), (long long)t.vocab.size());
  if (t.text) {
    std::printf("  training: %zu tokens\n  held-out: %zu tokens\n", t.text->train_tokens().size(),
                t.text->heldout_tokens().size());
    return;
  }
  // The window the sequences are held against: the --context given, or a
  // fine-tuned model's position table.
  const int64_t window = o.count_window > 0    ? o.count_window
                         : o.init_from.empty() ? 0
                                               : t.cfg.context;
  auto report = [&](const char* split, std::vector<int64_t> n) {
    if (n.empty()) return;
    std::sort(n.begin(), n.end());
    const int64_t over = window > 0 ? n.end() - std::upper_bound(n.begin(), n.end(), window) : 0;
    std::printf("  %-9s %zu sequences, tokens: shortest %lld, median %lld, 90%% %lld, longest %lld",
                split, n.size(), (long long)n.front(), (long long)n[n.size() / 2],
                (long long)n[n.size() * 9 / 10], (long long)n.back());
    if (window > 0)
      std::printf("; %lld longer than --context %lld", (long long)over, (long long)window);
    std::printf("\n");
  };
  auto lengths = [&](const std::vector<Pair>& pairs) {
    std::vector<int64_t> n;
    for (const Pair& p : pairs)
      n.push_back(t.classifies()
                      ? int64_t(p.src.size())
                      : sequence_tokens(t.family(), int64_t(p.src.size()), int64_t(p.tgt.size())));
    return n;
  };
  if (t.classifies()) {  // counted before any text was cut
    report("training:", t.uncut_train_tokens);
    report("held-out:", t.uncut_heldout_tokens);
  } else {
    report("training:", lengths(t.pairs->train_pairs()));
    std::vector<Pair> held;
    t.pairs->heldout().batch(0, t.pairs->heldout().size(), held);
    report("held-out:", lengths(held));
  }
  if (window == 0)
    std::printf(
        "  (--context N says how many are longer than N; a classifier cuts those to N "
        "unless --no-truncate)\n");
}

}  // namespace qkv::train
