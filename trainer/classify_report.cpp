// A classifier's reports (vit; one label per input): held-out accuracy with
// a confusion matrix, the test set scored once, and --ask's answer with the
// label's probability (declared in trainer/report.h); and its row of the
// evaluation table (trainer/eval_kinds.h), labels_eval.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "data/image.h"
#include "trainer/plots.h"
#include "trainer/eval_kinds.h"
#include "trainer/report.h"

namespace qkv::train {

namespace {
// The most labels confusion.svg draws: a matrix a person can read.
constexpr int64_t kConfusionShown = 40;

// The labels a confusion matrix shows: all C when C <= max_shown, else the
// max_shown most frequent true labels of the set (ties: the lower label),
// in label order. Returns each label's row (-1: not shown), so that the
// matrix is (shown, shown) however many labels the model has: 10,000
// labels would otherwise ask for a 10^8-cell matrix and an SVG no one reads.
std::vector<int64_t> shown_labels(const PairSet& set, int64_t C, int64_t max_shown,
                                  int64_t* shown) {
  std::vector<int64_t> row(static_cast<size_t>(C), -1);
  std::vector<int64_t> keep;
  if (C <= max_shown) {
    for (int64_t c = 0; c < C; ++c) keep.push_back(c);
  } else {
    std::vector<int64_t> freq(static_cast<size_t>(C), 0);
    std::vector<Pair> batch;
    for (size_t i = 0; i < set.size(); i += 500) {
      set.batch(i, std::min(set.size(), i + 500), batch);
      for (const Pair& p : batch)
        if (p.tgt.at(0) >= 0 && p.tgt[0] < C) freq[static_cast<size_t>(p.tgt[0])]++;
    }
    std::vector<int64_t> order(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) order[static_cast<size_t>(c)] = c;
    std::partial_sort(
        order.begin(), order.begin() + max_shown, order.end(), [&](int64_t a, int64_t b) {
          return freq[size_t(a)] > freq[size_t(b)] || (freq[size_t(a)] == freq[size_t(b)] && a < b);
        });
    keep.assign(order.begin(), order.begin() + max_shown);
    std::sort(keep.begin(), keep.end());
  }
  for (size_t k = 0; k < keep.size(); ++k) row[static_cast<size_t>(keep[k])] = int64_t(k);
  *shown = static_cast<int64_t>(keep.size());
  return row;
}

// counts[row(want) * K + row(got)] over a set and the predictions made for
// it, for the K labels `row` shows; the set read 500 pairs at a time into
// one buffer.
std::vector<int64_t> confusion_counts(const PairSet& set, const EvalResult& r,
                                      const std::vector<int64_t>& row, int64_t K) {
  std::vector<int64_t> counts(static_cast<size_t>(K * K), 0);
  const int64_t C = static_cast<int64_t>(row.size());
  const size_t n = std::min(set.size(), r.predictions.size());
  std::vector<Pair> batch;
  for (size_t i = 0; i < n; i += 500) {
    set.batch(i, std::min(n, i + 500), batch);
    for (size_t k = i; k < i + batch.size(); ++k) {
      const int64_t want = batch[k - i].tgt.at(0);
      const int64_t got = r.predictions[k].empty() ? -1 : r.predictions[k][0];
      if (want < 0 || want >= C || got < 0 || got >= C) continue;
      const int64_t a = row[size_t(want)], c = row[size_t(got)];
      if (a >= 0 && c >= 0) counts[static_cast<size_t>(a * K + c)]++;
    }
  }
  return counts;
}
}  // namespace

EvalResult classifier_report(Trainer& t, const RunOptions&) {
  const int64_t C = static_cast<int64_t>(t.labels.size());
  t.phase = "final evaluation";
  EvalResult r = t.evaluate();
  check_finite_result(r, "held-out evaluation");
  // The held-out set is read by every check during training too (it chooses
  // nothing by itself, but a user comparing runs on it selects with it).
  std::printf("\nheld-out (%lld inputs, never trained on; the checks during training read it):\n",
              (long long)r.sequences);
  std::printf("  accuracy %.2f%%, cross-entropy %.4f\n", 100 * r.exact_acc(), r.loss);
  // The confusion matrix: rows the true label, columns the answer.
  if (C <= 20) {
    int64_t K = 0;
    const std::vector<int64_t> row = shown_labels(t.pairs->heldout(), C, C, &K);
    const std::vector<int64_t> counts = confusion_counts(t.pairs->heldout(), r, row, K);
    std::vector<std::string> names;
    for (const std::string& n : t.labels) names.push_back(brief(n));
    size_t w = 5;
    for (const std::string& n : names) w = std::max(w, n.size() + 1);
    std::printf("  confusion (rows: true label, columns: answer)\n  %*s", int(w), "");
    for (int64_t c = 0; c < C; ++c) std::printf(" %*s", int(w), names[c].c_str());
    std::printf("\n");
    for (int64_t a = 0; a < C; ++a) {
      std::printf("  %*s", int(w), names[a].c_str());
      for (int64_t c = 0; c < C; ++c)
        std::printf(" %*lld", int(w), (long long)counts[static_cast<size_t>(a * C + c)]);
      std::printf("\n");
    }
  }
  if (!t.test_set.empty()) {
    t.phase = "test set";
    const EvalResult test = t.evaluate(t.test_set);
    check_finite_result(test, "test set");
    std::printf("test (%lld inputs, scored once, now): accuracy %.2f%%, cross-entropy %.4f\n",
                (long long)test.sequences, 100 * test.exact_acc(), test.loss);
  }
  return r;
}

void write_confusion_svg(const Trainer& t, const EvalResult& r, const std::string& path,
                         const std::string& title) {
  const int64_t C = static_cast<int64_t>(t.labels.size());
  int64_t K = 0;
  const std::vector<int64_t> row = shown_labels(t.pairs->heldout(), C, kConfusionShown, &K);
  const std::vector<int64_t> counts = confusion_counts(t.pairs->heldout(), r, row, K);
  std::vector<std::string> names;
  for (int64_t c = 0; c < C; ++c)
    if (row[size_t(c)] >= 0) names.push_back(t.labels[size_t(c)]);
  // Each row as fractions of its label's inputs answered with a shown
  // label: the heatmap's rows sum to 1.
  Tensor m = Tensor::zeros({1, K, K});
  for (int64_t a = 0; a < K; ++a) {
    int64_t n = 0;
    for (int64_t c = 0; c < K; ++c) n += counts[static_cast<size_t>(a * K + c)];
    for (int64_t c = 0; c < K; ++c)
      m.data()[a * K + c] =
          n ? real(double(counts[static_cast<size_t>(a * K + c)]) / double(n)) : 0;
  }
  const std::string of =
      K < C ? " (the " + std::to_string(K) + " most frequent of " + std::to_string(C) + " labels)"
            : "";
  plots::write_attention_svg(path, {m}, names, names, title + of);
}

Seq classifier_input(Trainer& t, const std::string& input, const std::string& flag) {
  Seq src;
  if (t.family().reads.images) {  // a PNG of the model's size
    const data::Image im = data::read_image(input, data::ImageShape{0, 0, t.shape.channels});
    if (im.rows != t.shape.rows || im.cols != t.shape.cols)
      throw Error(flag + " " + brief(input) + ": the image is " + std::to_string(im.rows) + "x" +
                  std::to_string(im.cols) + " but the model reads " + std::to_string(t.shape.rows) +
                  "x" + std::to_string(t.shape.cols));
    src.assign(im.pixels.begin(), im.pixels.end());
    return src;
  }
  // "<s> text </s>", or "<s> A </s> B </s>" for two texts given as "A<TAB>B",
  // as the classifier was trained.
  src.push_back(Vocab::kBos);
  for (size_t at = 0;;) {
    const size_t tab = input.find('\t', at);
    const Seq ids = t.encode_text(input.substr(at, tab == std::string::npos ? tab : tab - at));
    if (ids.empty()) throw Error(flag + ": a text of " + brief(input) + " has no tokens");
    src.insert(src.end(), ids.begin(), ids.end());
    src.push_back(Vocab::kEos);
    if (tab == std::string::npos) break;
    at = tab + 1;
  }
  t.check_source_fits(src.size());
  return src;
}

void write_class_attention_svg(Trainer& t, const std::string& path, const std::string& title) {
  if (!t.family().answers.class_attention || !t.family().reads.images) return;
  const PairSet& from = t.test_set.empty() ? t.pairs->heldout() : t.test_set;
  std::vector<Pair> set;  // the first 4 images drawn
  from.batch(0, std::min<size_t>(4, from.size()), set);
  const int64_t R = t.shape.rows, C = t.shape.cols, P = std::max<int64_t>(1, t.cfg.patch);
  const int64_t n_images = static_cast<int64_t>(set.size());
  const double px = 4, panel = double(std::max(R, C)) * px, gap = 14, top = 44, label = 18;
  const int64_t L = t.cfg.layers;
  const double W = gap + double(L + 1) * (panel + gap),
               H = top + double(n_images) * (panel + label + gap);
  std::ostringstream f;
  char b[320];
  std::snprintf(
      b, sizeof b,
      "<svg xmlns='http://www.w3.org/2000/svg' xmlns:xlink='http://www.w3.org/1999/xlink' "
      "width='%g' height='%g' font-family='sans-serif' font-size='11'>\n"
      "<rect width='100%%' height='100%%' fill='white'/>\n",
      std::max(W, 8.0 * double(title.size())), H);
  f << b << "<text x='" << gap << "' y='18' font-size='14'>" << plots::xml_escape(title)
    << "</text>\n<text x='" << gap << "' y='34' fill='#555'>first panel: the image; then layer 1.."
    << L << ": red = the class token's attention to each patch (mean over heads, each panel "
    << "scaled to its largest)</text>\n<defs>\n";
  t.model().eval();
  std::vector<std::vector<Tensor>> maps;
  for (int64_t i = 0; i < n_images;
       ++i) {  // each image once, in <defs>, drawn again under each layer
    const Seq& im = set[static_cast<size_t>(i)].src;
    f << "<g id='im" << i << "'>";
    for (int64_t y = 0; y < R; ++y)
      for (int64_t x = 0; x < C; ++x) {
        const int v = static_cast<int>(im[static_cast<size_t>(y * C + x)]);
        if (v == 0) continue;  // the panel's background is black
        std::snprintf(b, sizeof b,
                      "<rect x='%g' y='%g' width='%g' height='%g' fill='rgb(%d,%d,%d)'/>",
                      double(x) * px, double(y) * px, px, px, v, v, v);
        f << b;
      }
    f << "</g>\n";
    maps.push_back(t.family().answers.class_attention(t.model(), im));
  }
  f << "</defs>\n";
  const std::vector<Seq> answers = [&] {
    std::vector<Seq> srcs;
    for (int64_t i = 0; i < n_images; ++i) srcs.push_back(set[static_cast<size_t>(i)].src);
    return t.answer(srcs);
  }();
  for (int64_t i = 0; i < n_images; ++i) {
    const double y0 = top + double(i) * (panel + label + gap);
    const std::string want =
        t.labels.at(static_cast<size_t>(set[static_cast<size_t>(i)].tgt.at(0)));
    const std::string got =
        answers[static_cast<size_t>(i)].empty()
            ? "?"
            : t.labels.at(static_cast<size_t>(answers[static_cast<size_t>(i)][0]));
    f << "<text x='" << gap << "' y='" << y0 + 12 << "'>" << plots::xml_escape(want)
      << (want == got ? " (answered right)" : " (answered " + plots::xml_escape(got) + ")")
      << "</text>\n";
    for (int64_t l = 0; l <= L && l <= static_cast<int64_t>(maps[static_cast<size_t>(i)].size());
         ++l) {
      const double x0 = gap + double(l) * (panel + gap), yy = y0 + label;
      std::snprintf(
          b, sizeof b,
          "<rect x='%g' y='%g' width='%g' height='%g' fill='black'/><use xlink:href='#im%lld' "
          "x='%g' y='%g'/>",
          x0, yy, panel, panel, (long long)i, x0, yy);
      f << b;
      if (l > 0) {
        const Tensor& a = maps[static_cast<size_t>(i)][static_cast<size_t>(l - 1)];  // (H, N+1)
        const int64_t heads = a.size(0), N = a.size(1) - 1, cols = C / P;
        std::vector<double> share(static_cast<size_t>(N), 0);
        double most = 1e-12;
        for (int64_t k = 0; k < N; ++k) {
          for (int64_t h = 0; h < heads; ++h)
            share[static_cast<size_t>(k)] += a.data()[h * (N + 1) + 1 + k];
          share[static_cast<size_t>(k)] /= double(heads);
          most = std::max(most, share[static_cast<size_t>(k)]);
        }
        for (int64_t k = 0; k < N; ++k) {
          std::snprintf(
              b, sizeof b,
              "<rect x='%g' y='%g' width='%g' height='%g' fill='red' fill-opacity='%.3f'/>",
              x0 + double(k % cols * P) * px, yy + double(k / cols * P) * px, double(P) * px,
              double(P) * px, 0.75 * share[static_cast<size_t>(k)] / most);
          f << b;
        }
        std::snprintf(b, sizeof b, "<text x='%g' y='%g' fill='#555'>layer %lld</text>", x0,
                      yy + panel + 11, (long long)l);
        f << b;
      }
      f << "\n";
    }
  }
  f << "</svg>\n";
  write_file_atomically(path, "plot: " + brief(path), f.str());
}

void ask_classifier(Trainer& t, const std::string& input) {
  const Seq src = classifier_input(t, input, "--ask");
  const std::vector<double> p = t.family().answers.label_probabilities(t.model(), src);
  // Checked before they are sorted: NaN has no order.
  for (double q : p)
    if (!std::isfinite(q))
      throw Error(std::string("--ask: the model's label probabilities are ") +
                  (std::isnan(q) ? "NaN" : "Inf") +
                  ": its weights are not finite, or too large for float32 on this input");
  std::vector<size_t> order(p.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  // A label name comes from a file: quoted as every other text from one is.
  std::printf("%s (probability %.3f)", brief(t.labels.at(order[0])).c_str(), p[order[0]]);
  for (size_t k = 1; k < 3 && k < order.size(); ++k)
    std::printf("%s %s %.3f", k == 1 ? "; then" : ",", brief(t.labels.at(order[k])).c_str(),
                p[order[k]]);
  std::printf("\n");
}

Seq masked_input(Trainer& t, const std::string& text, const std::string& flag) {
  const std::string mask = t.family().objectives.extra_special;  // "[MASK]"
  // The model's mask token (model_config's mask_id): "[MASK]" in the text
  // marks it, whatever the vocabulary calls it; the token itself, typed, is
  // one too.
  const int64_t mask_id = t.shape.mask_id;
  // "<s> piece [MASK] piece ... </s>": each piece cut as the run cuts text.
  // A space before a mask is the masked word's own (" board" in "a board
  // game" is one token): it goes with the mask, not with the piece before.
  Seq ids{Vocab::kBos};
  size_t at = 0;
  for (;;) {
    const size_t m = text.find(mask, at);
    std::string piece = text.substr(at, m == std::string::npos ? std::string::npos : m - at);
    if (m != std::string::npos && !piece.empty() && piece.back() == ' ') piece.pop_back();
    const Seq p = t.encode_text(piece);
    ids.insert(ids.end(), p.begin(), p.end());
    if (m == std::string::npos) break;
    ids.push_back(mask_id);
    at = m + mask.size();
  }
  ids.push_back(Vocab::kEos);
  if (std::find(ids.begin(), ids.end(), mask_id) == ids.end())
    throw Error(flag + ": no " + mask + " in " + brief(text) + ": the " + t.cfg.model +
                " model fills in " + mask + " tokens, e.g. " + flag + " \"a " + mask + " game\"");
  t.check_source_fits(ids.size());  // with <s> and </s>
  return ids;
}

void ask_masked(Trainer& t, const std::string& text) {
  const Seq ids = masked_input(t, text, "--ask");
  const int64_t mask_id = t.shape.mask_id;
  const std::string mask = t.family().objectives.extra_special;
  const Tensor p = t.family().answers.token_probabilities(t.model(), ids);  // (T, V)
  const int64_t V = p.size(1);
  int64_t k = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] != mask_id) continue;
    const real* row = p.data() + static_cast<int64_t>(i) * V;
    std::vector<int64_t> order(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) order[static_cast<size_t>(v)] = v;
    std::partial_sort(order.begin(), order.begin() + std::min<int64_t>(5, V), order.end(),
                      [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    std::printf("%s %lld:", mask.c_str(), (long long)++k);
    for (int64_t j = 0; j < std::min<int64_t>(5, V); ++j) {
      // A token's text, with a line break or tab shown as \n or \t.
      std::string shown;
      for (char ch : data::utf8_or_replacement(t.decode_text({order[static_cast<size_t>(j)]})))
        shown += ch == '\n'   ? std::string("\\n")
                 : ch == '\t' ? std::string("\\t")
                              : std::string(1, ch);
      std::printf("%s '%s' %.3f", j ? "," : "", shown.c_str(),
                  double(row[order[static_cast<size_t>(j)]]));
    }
    std::printf("\n");
  }
}

EvalKind labels_eval() {
  EvalKind k;
  k.name = "labels";
  k.help = "accuracy and cross-entropy of one label per input, a confusion matrix";
  k.takes = [](const Trainer& t) { return t.classifies(); };
  k.line = [](const EvalResult& r) {
    return printed("accuracy %.2f%%, cross-entropy %.4f", 100 * r.exact_acc(), r.loss);
  };
  k.summary = [](const EvalResult& r) {
    return printed("held-out accuracy: %.2f%%", 100 * r.exact_acc());
  };
  k.cells = answer_cells;
  k.judged_by = plots::EvalKind::Accuracy;
  k.metric = [](const EvalResult& r) { return r.exact_acc(); };
  k.final_report = classifier_report;
  return k;
}

}  // namespace qkv::train
