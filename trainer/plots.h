// Small SVG writers for the training program: a loss/accuracy curve and
// attention heatmaps with token labels on the axes. SVG is plain text, so no
// image library is needed and the files open in any browser. Each is written
// atomically, as every output (io/output_file.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/output_file.h"

namespace qkv::plots {

inline std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

// What the held-out evaluations measured: an accuracy in [0, 1] (drawn on a
// right axis in %) or a loss (drawn on the loss axis).
enum class EvalKind { Accuracy, Loss };

// Shares per step (0..1, one line per series: an expert's share of the kept
// assignments, --experts), with the even share 1 / series dashed.
inline void write_shares_svg(const std::string& path, const std::vector<double>& steps,
                             const std::vector<std::vector<double>>& shares,
                             const std::string& title) {
  const double W = 720, H = 420, L = 70, R = 110, T = 40, Bm = 50;
  const double pw = W - L - R, ph = H - T - Bm;
  if (steps.empty() || shares.empty() || shares.size() != steps.size()) return;
  const size_t E = shares.front().size();
  const double x0 = steps.front(), x1 = std::max(steps.back(), x0 + 1);
  auto X = [&](double s) { return L + (s - x0) / (x1 - x0) * pw; };
  auto Y = [&](double v) { return T + (1 - std::clamp(v, 0.0, 1.0)) * ph; };
  static const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  std::ostringstream f;  // written at the end, atomically (io/output_file.h)
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
                "font-family='sans-serif' font-size='12'>\n",
                W, H);
  f << buf << "<rect width='100%' height='100%' fill='white'/>\n";
  f << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << xml_escape(title)
    << "</text>\n";
  for (int i = 0; i <= 4; ++i) {  // 0%, 25%, ... 100%
    const double v = i / 4.0;
    std::snprintf(buf, sizeof buf,
                  "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#ddd'/>"
                  "<text x='%g' y='%g' text-anchor='end'>%g%%</text>\n",
                  L, Y(v), L + pw, Y(v), L - 6, Y(v) + 4, 100 * v);
    f << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#555' stroke-dasharray='4 4'/>\n", L,
                Y(1.0 / double(E)), L + pw, Y(1.0 / double(E)));
  f << buf;
  std::snprintf(buf, sizeof buf,
                "<text x='%g' y='%g' text-anchor='middle'>step (%g to %g)</text>\n", L + pw / 2,
                H - 12, x0, x1);
  f << buf;
  for (size_t e = 0; e < E; ++e) {
    f << "<polyline fill='none' stroke-width='1.5' stroke='" << colours[e % 8] << "' points='";
    for (size_t i = 0; i < steps.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(steps[i]),
                    Y(e < shares[i].size() ? shares[i][e] : 0));
      f << buf;
    }
    f << "'/>\n";
    std::snprintf(buf, sizeof buf, "<text x='%g' y='%g' fill='%s'>expert %zu</text>\n", L + pw + 8,
                  T + 16 * double(e + 1), colours[e % 8], e);
    f << buf;
  }
  f << "</svg>\n";
  write_file_atomically(path, "plot: " + brief(path), f.str());
}

// Loss per step (log scale) with every held-out evaluation marked: a dashed
// line at its step, a dot at its value and the value written beside it.
inline void write_loss_svg(const std::string& path, const std::vector<double>& steps,
                           const std::vector<double>& loss, const std::vector<double>& eval_steps,
                           const std::vector<double>& eval_values, const std::string& title,
                           EvalKind kind = EvalKind::Accuracy) {
  const double W = 720, H = 420, L = 70, R = 60, T = 40, Bm = 50;
  const double pw = W - L - R, ph = H - T - Bm;
  if (steps.empty()) return;
  const double x0 = steps.front(), x1 = std::max(steps.back(), x0 + 1);
  double lo = 1e300, hi = -1e300;
  for (double v : loss)
    if (v > 0) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (kind == EvalKind::Loss)
    for (double v : eval_values)
      if (v > 0) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  if (!(lo < hi)) {
    lo = lo > 0 && lo < 1e300 ? lo / 2 : 1e-3;
    hi = lo * 4;
  }
  const double llo = std::floor(std::log10(lo)), lhi = std::ceil(std::log10(hi));
  auto X = [&](double s) { return L + (s - x0) / (x1 - x0) * pw; };
  auto Y = [&](double v) {
    return T + (lhi - std::log10(std::max(v, 1e-30))) / std::max(lhi - llo, 1.0) * ph;
  };
  auto Ya = [&](double a) { return T + (1 - a) * ph; };
  std::ostringstream f;  // written at the end, atomically (io/output_file.h)
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
                "font-family='sans-serif' font-size='12'>\n",
                W, H);
  f << buf << "<rect width='100%' height='100%' fill='white'/>\n";
  f << "<text x='" << W / 2 << "' y='22' text-anchor='middle' font-size='15'>" << xml_escape(title)
    << "</text>\n";
  // Axes and decade grid lines.
  for (double d = llo; d <= lhi; d += 1) {
    std::snprintf(buf, sizeof buf,
                  "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#ddd'/><text x='%g' y='%g' "
                  "text-anchor='end'>1e%d</text>\n",
                  L, Y(std::pow(10, d)), L + pw, Y(std::pow(10, d)), L - 6, Y(std::pow(10, d)) + 4,
                  static_cast<int>(d));
    f << buf;
  }
  // Step ticks at round numbers: 1, 2 or 5 times a power of ten, about 6 of them.
  const double raw = (x1 - x0) / 6,
               mag = std::pow(10.0, std::floor(std::log10(std::max(raw, 1.0))));
  const double tick = raw <= mag       ? mag
                      : raw <= 2 * mag ? 2 * mag
                      : raw <= 5 * mag ? 5 * mag
                                       : 10 * mag;
  for (double s = std::ceil(x0 / tick) * tick; s <= x1; s += tick) {
    std::snprintf(buf, sizeof buf, "<text x='%g' y='%g' text-anchor='middle'>%.0f</text>\n", X(s),
                  T + ph + 18, s);
    f << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<rect x='%g' y='%g' width='%g' height='%g' fill='none' stroke='black'/>\n", L, T,
                pw, ph);
  f << buf;
  f << "<text x='" << L + pw / 2 << "' y='" << H - 10 << "' text-anchor='middle'>step</text>\n";
  f << "<text x='16' y='" << T + ph / 2 << "' transform='rotate(-90 16 " << T + ph / 2
    << ")' text-anchor='middle' fill='#1f77b4'>training loss (log; dark: moving average)</text>\n";
  // Raw loss, light; an exponential moving average (0.95) of it on top.
  f << "<polyline fill='none' stroke='#aec7e8' stroke-width='1' points='";
  for (size_t i = 0; i < steps.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(steps[i]), Y(loss[i]));
    f << buf;
  }
  f << "'/>\n<polyline fill='none' stroke='#1f77b4' stroke-width='1.8' points='";
  double ema = loss.front();
  for (size_t i = 0; i < steps.size(); ++i) {
    ema = 0.95 * ema + 0.05 * loss[i];
    std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(steps[i]), Y(ema));
    f << buf;
  }
  f << "'/>\n";
  if (!eval_steps.empty()) {
    const bool acc = kind == EvalKind::Accuracy;
    if (acc)
      for (int i = 0; i <= 4; ++i) {
        std::snprintf(buf, sizeof buf, "<text x='%g' y='%g' fill='#d62728'>%d%%</text>\n",
                      L + pw + 6, Ya(i / 4.0) + 4, i * 25);
        f << buf;
      }
    auto y_of = [&](double v) { return acc ? Ya(v) : Y(v); };
    f << "<polyline fill='none' stroke='#d62728' stroke-width='1.5' points='";
    for (size_t i = 0; i < eval_steps.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(eval_steps[i]), y_of(eval_values[i]));
      f << buf;
    }
    f << "'/>\n";
    // Each evaluation: a dashed line at its step, a dot, and its value.
    for (size_t i = 0; i < eval_steps.size(); ++i) {
      const double x = X(eval_steps[i]), y = y_of(eval_values[i]);
      char value[32];
      if (acc)
        std::snprintf(value, sizeof value, "%.1f%%", 100 * eval_values[i]);
      else
        std::snprintf(value, sizeof value, "%.3g", eval_values[i]);
      char mark[1024];  // ~240 bytes with typical numbers; room for any double
      std::snprintf(
          mark, sizeof mark,
          "<line x1='%.1f' y1='%g' x2='%.1f' y2='%g' stroke='#d62728' stroke-opacity='0.35' "
          "stroke-dasharray='3,3'/>"
          "<circle cx='%.1f' cy='%.1f' r='3.5' fill='#d62728'/>"
          "<text x='%.1f' y='%.1f' font-size='10' fill='#d62728' text-anchor='end'>%s</text>\n",
          x, T, x, T + ph, x, y, x - 5, y - 6, value);
      f << mark;
    }
    f << "<text x='" << L + 8 << "' y='" << T + 16 << "' fill='#d62728'>"
      << (acc ? "held-out exact-sequence accuracy (right axis); dashed: each evaluation"
              : "held-out loss (same axis); dashed: each evaluation")
      << "</text>\n";
  }
  f << "</svg>\n";
  write_file_atomically(path, "plot: " + brief(path), f.str());
}

// One heatmap per (layer, head): rows are target positions, columns source
// positions; darker = more attention. weights[l] is (H, T, S) for one example.
inline void write_attention_svg(const std::string& path, const std::vector<Tensor>& weights,
                                const std::vector<std::string>& src_labels,
                                const std::vector<std::string>& tgt_labels,
                                const std::string& title) {
  if (weights.empty()) return;
  const int64_t H = weights[0].size(0), T = weights[0].size(1), S = weights[0].size(2);
  const double cell = 22, pad = 40, label = 46;
  const double pw = label + S * cell, ph = label + T * cell + 20;
  const double bar = 70;  // room for the colour scale on the right
  // Wide enough for the title, tall enough for the colour scale.
  const double W =
      std::max(pad + H * (pw + pad) + bar, 2 * pad + 8.5 * static_cast<double>(title.size()));
  const double Ht = std::max(50 + weights.size() * (ph + pad), 70 + label + 160 + 30);
  std::ostringstream f;  // written at the end, atomically (io/output_file.h)
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
                "font-family='monospace' font-size='11'>\n",
                W, Ht);
  f << buf << "<rect width='100%' height='100%' fill='white'/>\n";
  f << "<text x='" << pad << "' y='24' font-family='sans-serif' font-size='15'>"
    << xml_escape(title) << "</text>\n";
  // The colour scale: white = weight 0, full blue = weight 1 (each row sums to 1).
  {
    const double bx = W - bar + 10, by = 70 + label, bh = 160, steps = 20;
    for (int k = 0; k < steps; ++k) {
      const double v = 1 - (k + 0.5) / steps;
      const int shade = static_cast<int>(255 * (1 - v));
      std::snprintf(buf, sizeof buf,
                    "<rect x='%g' y='%g' width='14' height='%g' fill='rgb(%d,%d,255)'/>\n", bx,
                    by + k * bh / steps, bh / steps + 0.5, shade, shade);
      f << buf;
    }
    std::snprintf(
        buf, sizeof buf,
        "<rect x='%g' y='%g' width='14' height='%g' fill='none' stroke='#888'/>"
        "<text x='%g' y='%g'>1</text><text x='%g' y='%g'>0.5</text><text x='%g' y='%g'>0</text>"
        "<text x='%g' y='%g' font-family='sans-serif' font-size='10'>weight</text>\n",
        bx, by, bh, bx + 18, by + 4, bx + 18, by + bh / 2 + 4, bx + 18, by + bh + 4, bx - 4,
        by - 8);
    f << buf;
  }
  for (size_t l = 0; l < weights.size(); ++l)
    for (int64_t h = 0; h < H; ++h) {
      const double ox = pad + h * (pw + pad), oy = 50 + l * (ph + pad);
      std::snprintf(buf, sizeof buf,
                    "<text x='%g' y='%g' font-family='sans-serif'>layer %zu, head %lld</text>\n",
                    ox, oy + 10, l, static_cast<long long>(h));
      f << buf;
      const real* w = weights[l].data() + h * T * S;
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < S; ++j) {
          const double v = std::clamp(static_cast<double>(w[i * S + j]), 0.0, 1.0);
          const int shade = static_cast<int>(255 * (1 - v));
          std::snprintf(buf, sizeof buf,
                        "<rect x='%g' y='%g' width='%g' height='%g' fill='rgb(%d,%d,255)'/>\n",
                        ox + label + j * cell, oy + 20 + label + i * cell, cell, cell, shade,
                        shade);
          f << buf;
        }
      for (int64_t j = 0; j < S && j < static_cast<int64_t>(src_labels.size()); ++j) {
        std::snprintf(buf, sizeof buf, "<text x='%g' y='%g' text-anchor='middle'>%s</text>\n",
                      ox + label + (j + 0.5) * cell, oy + 20 + label - 6,
                      xml_escape(src_labels[j]).c_str());
        f << buf;
      }
      for (int64_t i = 0; i < T && i < static_cast<int64_t>(tgt_labels.size()); ++i) {
        std::snprintf(buf, sizeof buf, "<text x='%g' y='%g' text-anchor='end'>%s</text>\n",
                      ox + label - 6, oy + 20 + label + (i + 0.65) * cell,
                      xml_escape(tgt_labels[i]).c_str());
        f << buf;
      }
      std::snprintf(buf, sizeof buf,
                    "<text x='%g' y='%g' font-size='9' fill='#555'>source &#8594;</text>\n",
                    ox + label, oy + 32);
      f << buf;
    }
  f << "</svg>\n";
  write_file_atomically(path, "plot: " + brief(path), f.str());
}

// A token as a label of `n` characters: its first n (a UTF-8 character is
// never cut; a control character or a byte that is not UTF-8 shows as '?'),
// padded with spaces to n, on the left when `right_aligned`.
inline std::string label_cell(const std::string& s, size_t n, bool right_aligned = false) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size() && chars < n; ++chars) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = utf8_char_length(s, i);
    if (len == 0 || c < 0x20 || c == 0x7f)
      out += '?';
    else
      out.append(s, i, len);
    i += len == 0 ? 1 : len;
  }
  const std::string pad(n - chars, ' ');
  return right_aligned ? pad + out : out + pad;
}

// A coarse terminal rendering of one (T, S) attention map with shade characters.
inline std::string ascii_heatmap(const real* w, int64_t T, int64_t S,
                                 const std::vector<std::string>& src_labels,
                                 const std::vector<std::string>& tgt_labels) {
  static const char* shades[] = {" ", ".", ":", "+", "#", "@"};
  std::string out = "      shades from weight 0 to 1, in steps of 1/6: ' ' . : + # @\n      ";
  for (int64_t j = 0; j < S; ++j) {
    const std::string l = j < static_cast<int64_t>(src_labels.size()) ? src_labels[j] : "?";
    out += label_cell(l, 2) + " ";
  }
  out += "\n";
  for (int64_t i = 0; i < T; ++i) {
    const std::string l = i < static_cast<int64_t>(tgt_labels.size()) ? tgt_labels[i] : "?";
    out += label_cell(l, 5, /*right_aligned=*/true) + " ";
    for (int64_t j = 0; j < S; ++j) {
      const int k = std::clamp(static_cast<int>(w[i * S + j] * 5.999), 0, 5);
      out += std::string(2, shades[k][0]) + " ";
    }
    out += "\n";
  }
  return out;
}

}  // namespace qkv::plots
