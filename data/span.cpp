// Span corruption (data/span.h): T5's random_spans_noise_mask and the
// source/target it makes.
#include "data/span.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace qkv::data {

namespace {

// n items cut into k non-empty runs, uniformly among the C(n-1, k-1) cuts:
// choose k - 1 of the n - 1 gaps between items (a partial Fisher-Yates
// shuffle). Returns the k run lengths.
std::vector<int64_t> random_segmentation(int64_t n, int64_t k, Generator& g) {
  std::vector<int64_t> gaps(static_cast<size_t>(n - 1));
  for (int64_t i = 0; i < n - 1; ++i) gaps[static_cast<size_t>(i)] = i + 1;  // cut after item i
  for (int64_t j = 0; j < k - 1; ++j)
    std::swap(gaps[static_cast<size_t>(j)], gaps[static_cast<size_t>(g.randint(j, n - 1))]);
  std::sort(gaps.begin(), gaps.begin() + (k - 1));
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<size_t>(k));
  int64_t at = 0;
  for (int64_t j = 0; j < k - 1; ++j) {
    lengths.push_back(gaps[static_cast<size_t>(j)] - at);
    at = gaps[static_cast<size_t>(j)];
  }
  lengths.push_back(n - at);
  return lengths;
}

}  // namespace

SpanCounts span_counts(int64_t length, const SpanOptions& o) {
  if (!(o.noise > 0 && o.noise < 1))
    throw Error("corrupt_spans: noise " + std::to_string(o.noise) + " is outside (0, 1)");
  if (!(o.mean_span >= 1))
    throw Error("corrupt_spans: mean_span " + std::to_string(o.mean_span) + " is below 1");
  if (length < 2)
    throw Error("corrupt_spans: a sequence of " + std::to_string(length) +
                " tokens is shorter than one hidden span and one kept token");
  SpanCounts c;
  // T5: num_noise = round(L * density), clipped to [1, L - 1].
  c.noise_tokens = std::clamp<int64_t>(std::llround(double(length) * o.noise), 1, length - 1);
  // num_spans = round(num_noise / mean_span), at least 1; both the hidden and
  // the kept tokens must fill that many non-empty runs.
  c.spans = std::max<int64_t>(1, std::llround(double(c.noise_tokens) / o.mean_span));
  c.spans = std::min({c.spans, c.noise_tokens, length - c.noise_tokens});
  return c;
}

int64_t sentinels_needed(int64_t length, const SpanOptions& o) {
  return span_counts(length, o).spans + (o.roll ? 2 : 1);
}

std::vector<uint8_t> span_noise_mask(int64_t length, const SpanOptions& o, Generator& g) {
  const SpanCounts c = span_counts(length, o);
  const std::vector<int64_t> hidden = random_segmentation(c.noise_tokens, c.spans, g);
  const std::vector<int64_t> kept = random_segmentation(length - c.noise_tokens, c.spans, g);
  std::vector<uint8_t> mask;
  mask.reserve(static_cast<size_t>(length));
  for (int64_t s = 0; s < c.spans; ++s) {  // kept, hidden, kept, hidden, ...
    mask.insert(mask.end(), static_cast<size_t>(kept[static_cast<size_t>(s)]), 0);
    mask.insert(mask.end(), static_cast<size_t>(hidden[static_cast<size_t>(s)]), 1);
  }
  if (o.roll) std::rotate(mask.begin(), mask.begin() + g.randint(0, length), mask.end());
  return mask;
}

Pair corrupt_spans(const Seq& ids, const SpanOptions& o, Generator& g) {
  const int64_t L = static_cast<int64_t>(ids.size());
  const int64_t need = sentinels_needed(L, o);
  if (need > static_cast<int64_t>(o.sentinels.size()))
    throw Error("corrupt_spans: a sequence of " + std::to_string(L) + " tokens needs " +
                std::to_string(need) + " sentinels, and " + std::to_string(o.sentinels.size()) +
                " were given");
  const std::vector<uint8_t> mask = span_noise_mask(L, o, g);
  Pair p;
  size_t next = 0;  // the next sentinel
  for (int64_t i = 0; i < L; ++i) {
    const bool starts =
        mask[static_cast<size_t>(i)] && (i == 0 || !mask[static_cast<size_t>(i - 1)]);
    if (starts) {  // a span begins: one sentinel in the source, the same one in the target
      p.src.push_back(o.sentinels[next]);
      p.tgt.push_back(o.sentinels[next]);
      ++next;
    }
    (mask[static_cast<size_t>(i)] ? p.tgt : p.src).push_back(ids[static_cast<size_t>(i)]);
  }
  p.tgt.push_back(o.sentinels[next]);  // the last sentinel closes the target
  return p;
}

std::string sentinel_name(int64_t i) { return "<extra_id_" + std::to_string(i) + ">"; }

}  // namespace qkv::data
