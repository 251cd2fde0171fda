// Span corruption, T5's pre-training objective (Raffel et al. 2020, section
// 3.1.4): of a sequence's L tokens, round(L * noise) (at least 1, at most
// L - 1) are hidden, in round(noise tokens / mean_span) spans (at least 1).
// Both the hidden tokens and the kept ones are cut into that many non-empty
// runs, uniformly among all such cuts, and the runs alternate kept, hidden,
// kept, hidden, ... as in T5's random_spans_noise_mask; then the whole mask is
// rotated by a uniform offset in [0, L) (T5's random_roll: without it the
// last tokens are always hidden, and a short window with one span hides only
// its end; with it a span may wrap, becoming one at the end and one at the
// start, so a sequence may have one span more). Each hidden span
// becomes one sentinel in the source; the target lists each sentinel
// followed by the span it hides, and a last sentinel closes it:
//
//   tokens  Thank you for inviting me to your party last week .
//   source  Thank you <X> me to your party <Y> week .
//   target  <X> for inviting <Y> last <Z>
//
// The sentinels are T5's <extra_id_0>, <extra_id_1>, ... (sentinel_name), in
// order of position; a sequence with n spans uses n + 1 of them.
//
//   data::SpanOptions o;  o.sentinels = {id0, id1, ...};
//   data::Pair p = data::corrupt_spans(ids, o, gen);   // p.src, p.tgt
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/generator.h"
#include "data/batch.h"

namespace qkv::data {

struct SpanOptions {
  double noise = 0.15;     // the share of tokens hidden
  double mean_span = 3.0;  // the mean length of a hidden span
  bool roll = true;        // rotate the mask by a random offset (T5's random_roll)
  // The sentinels' ids, in order; a sequence needs one more than its spans.
  std::vector<int64_t> sentinels;
};

// The counts T5 uses for a sequence of `length` tokens: hidden tokens and
// spans. Error naming the option for noise outside (0, 1), mean_span < 1,
// or length < 2 (one hidden token and one kept need two).
struct SpanCounts {
  int64_t noise_tokens = 0, spans = 0;
};
SpanCounts span_counts(int64_t length, const SpanOptions& o);

// 0/1 per token: which are hidden (the runs described above). Deterministic given g.
std::vector<uint8_t> span_noise_mask(int64_t length, const SpanOptions& o, Generator& g);

// Pair{source with a sentinel per span, target "s0 span0 s1 span1 .. sn"}.
// Error when the sequence needs more sentinels than o.sentinels holds.
Pair corrupt_spans(const Seq& ids, const SpanOptions& o, Generator& g);

// "<extra_id_3>": the name of sentinel i, as T5's vocabulary spells it.
std::string sentinel_name(int64_t i);

// The sentinels a sequence of `length` tokens can need: one per span (its
// spans, and one more when the rotation splits a span) and the closing one.
int64_t sentinels_needed(int64_t length, const SpanOptions& o);

}  // namespace qkv::data
