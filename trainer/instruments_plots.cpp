// The instruments' pictures (trainer/instruments_plots.h): one line chart
// writer, used three times, and a small-multiples histogram chart.
#include "trainer/instruments_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "io/output_file.h"
#include "trainer/instruments.h"
#include "trainer/plots.h"

namespace qkv::train {

using json = nlohmann::json;

namespace {
const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// One chart: every series as a line over the steps, a legend on the right,
// and dashed guide lines at `guides` (value, label).
void write_lines_svg(const std::string& path, const std::string& title, const std::string& ylabel,
                     const std::vector<Series>& series,
                     const std::vector<std::pair<double, std::string>>& guides) {
  const double W = 900, H = 440, L = 70, R = 300, T = 40, Bm = 50, pw = W - L - R, ph = H - T - Bm;
  double x0 = 1e300, x1 = -1e300, lo = 1e300, hi = -1e300;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      lo = std::min(lo, s.y[i]);
      hi = std::max(hi, s.y[i]);
    }
  for (const auto& g : guides) {
    lo = std::min(lo, g.first);
    hi = std::max(hi, g.first);
  }
  if (x0 > x1) {  // no point at all (a run that diverged before its first record)
    x0 = 0;
    x1 = 1;
  } else if (!(x0 < x1)) {
    x1 = x0 + 1;
  }
  if (!(lo < hi)) {
    lo = lo < 1e300 ? lo - 1 : 0;
    hi = lo + 2;
  }
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto X = [&](double s) { return L + (s - x0) / (x1 - x0) * pw; };
  auto Y = [&](double v) { return T + (hi - v) / (hi - lo) * ph; };
  std::ostringstream f;
  char b[1024];
  std::snprintf(
      b, sizeof b,
      "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
      "font-family='sans-serif' font-size='12'>\n<rect width='100%%' height='100%%' "
      "fill='white'/>\n<text x='%g' y='22' text-anchor='middle' font-size='15'>%s</text>\n",
      W, H, L + pw / 2, plots::xml_escape(title).c_str());
  f << b;
  for (int i = 0; i <= 5; ++i) {  // value grid
    const double v = lo + (hi - lo) * i / 5;
    std::snprintf(b, sizeof b,
                  "<line x1='%g' y1='%.1f' x2='%g' y2='%.1f' stroke='#eee'/><text x='%g' y='%.1f' "
                  "text-anchor='end'>%.3g</text>\n",
                  L, Y(v), L + pw, Y(v), L - 6, Y(v) + 4, v);
    f << b;
  }
  for (int i = 0; i <= 5; ++i) {  // step ticks
    const double s = x0 + (x1 - x0) * i / 5;
    std::snprintf(b, sizeof b, "<text x='%.1f' y='%g' text-anchor='middle'>%.0f</text>\n", X(s),
                  T + ph + 18, s);
    f << b;
  }
  std::snprintf(
      b, sizeof b,
      "<rect x='%g' y='%g' width='%g' height='%g' fill='none' stroke='black'/>\n"
      "<text x='%g' y='%g' text-anchor='middle'>step</text>\n"
      "<text x='16' y='%g' transform='rotate(-90 16 %g)' text-anchor='middle'>%s</text>\n",
      L, T, pw, ph, L + pw / 2, H - 10, T + ph / 2, T + ph / 2, plots::xml_escape(ylabel).c_str());
  f << b;
  for (const auto& g : guides) {
    std::snprintf(
        b, sizeof b,
        "<line x1='%g' y1='%.1f' x2='%g' y2='%.1f' stroke='black' stroke-dasharray='6,4'/>"
        "<text x='%g' y='%.1f' font-size='11'>%s</text>\n",
        L, Y(g.first), L + pw, Y(g.first), L + 4, Y(g.first) - 4,
        plots::xml_escape(g.second).c_str());
    f << b;
  }
  const size_t shown = std::min<size_t>(series.size(), 30);
  const double line_h = std::min(14.0, ph / std::max<size_t>(shown, 1));
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* c = kColors[k % 10];
    f << "<polyline fill='none' stroke='" << c << "' stroke-width='1.3' points='";
    for (size_t i = 0; i < s.x.size(); ++i) {
      std::snprintf(b, sizeof b, "%.1f,%.1f ", X(s.x[i]), Y(s.y[i]));
      f << b;
    }
    f << "'/>\n";
    if (k < shown) {
      std::snprintf(b, sizeof b,
                    "<line x1='%g' y1='%.1f' x2='%g' y2='%.1f' stroke='%s' stroke-width='3'/>"
                    "<text x='%g' y='%.1f' font-size='10'>%s</text>\n",
                    L + pw + 10, T + line_h * (k + 0.5), L + pw + 26, T + line_h * (k + 0.5), c,
                    L + pw + 30, T + line_h * (k + 0.5) + 3, plots::xml_escape(s.name).c_str());
      f << b;
    }
  }
  if (series.size() > shown)
    f << "<text x='" << L + pw + 10 << "' y='" << T + ph + 14 << "' font-size='10'>and "
      << series.size() - shown << " more</text>\n";
  f << "</svg>\n";
  write_file_atomically(path, "plot: " + brief(path), f.str());
}

std::vector<const json*> watched(const std::vector<json>& records) {
  std::vector<const json*> out;
  for (const json& r : records)
    if (r.contains("params")) out.push_back(&r);
  return out;
}

// Each parameter's (or head's) values over the watched steps, in first-seen order.
std::vector<Series> by_name(
    const std::vector<const json*>& w,
    const std::function<void(const json&, double, std::map<std::string, Series>&,
                             std::vector<std::string>&)>& take) {
  std::map<std::string, Series> m;
  std::vector<std::string> order;
  for (const json* r : w) take(*r, (*r)["step"].get<double>(), m, order);
  std::vector<Series> out;
  for (const std::string& n : order) out.push_back(std::move(m[n]));
  return out;
}

void add_point(std::map<std::string, Series>& m, std::vector<std::string>& order,
               const std::string& n, double x, double y) {
  if (!m.count(n)) {
    order.push_back(n);
    m[n].name = n;
  }
  m[n].x.push_back(x);
  m[n].y.push_back(y);
}

// The feed-forward blocks' hidden histograms at up to four watched steps:
// one panel per block, one line per step (as TensorBoard's overlaid histograms).
void write_histograms_svg(const std::string& path, const std::vector<const json*>& w) {
  std::vector<const json*> at;  // the first, last and two between
  for (int k = 0; k < 4 && !w.empty(); ++k) {
    const json* r = w[size_t(std::llround(double(k) * double(w.size() - 1) / 3))];
    if (at.empty() || at.back() != r) at.push_back(r);
  }
  std::vector<std::string> layers;
  if (!at.empty())
    for (const json& l : (*at.back())["layers"])
      if (l.value("kind", "") == "ffn") layers.push_back(l["layer"]);
  const double pw = 380, ph = 150, cols = 2, gap = 60;
  const double rows = std::max(1.0, std::ceil(double(layers.size()) / cols));
  const double W = cols * (pw + gap) + 40, H = 60 + rows * (ph + gap);
  std::ostringstream f;
  char b[1024];
  std::snprintf(b, sizeof b,
                "<svg xmlns='http://www.w3.org/2000/svg' width='%g' height='%g' "
                "font-family='sans-serif' font-size='11'>\n<rect width='100%%' height='100%%' "
                "fill='white'/>\n<text x='%g' y='22' text-anchor='middle' font-size='15'>feed-"
                "forward hidden units after the activation: histograms (fraction of values per "
                "bin)</text>\n",
                W, H, W / 2);
  f << b;
  for (size_t k = 0; k < at.size(); ++k) {
    std::snprintf(b, sizeof b,
                  "<line x1='%g' y1='40' x2='%g' y2='40' stroke='%s' stroke-width='3'/><text "
                  "x='%g' y='44'>step %lld</text>\n",
                  50 + 110.0 * k, 66 + 110.0 * k, kColors[k], 70 + 110.0 * k,
                  (long long)(*at[k])["step"].get<int64_t>());
    f << b;
  }
  for (size_t li = 0; li < layers.size(); ++li) {
    const double ox = 50 + (li % 2) * (pw + gap), oy = 70 + std::floor(li / 2.0) * (ph + gap);
    double lo = 1e300, hi = -1e300, top = 0;
    std::vector<const json*> hs;
    for (const json* r : at)
      for (const json& l : (*r)["layers"])
        if (l.value("layer", "") == layers[li] && l.contains("hist")) {
          hs.push_back(&l);
          lo = std::min(lo, l["hist"]["lo"].get<double>());
          hi = std::max(hi, l["hist"]["hi"].get<double>());
        }
    if (hs.empty()) continue;
    if (!(lo < hi)) hi = lo + 1;
    for (const json* l : hs) {
      const std::vector<double> c = (*l)["hist"]["counts"];
      double n = 0;
      for (double v : c) n += v;
      for (double v : c) top = std::max(top, n > 0 ? v / n : 0);
    }
    top = std::max(top, 1e-9);
    std::snprintf(b, sizeof b,
                  "<rect x='%g' y='%g' width='%g' height='%g' fill='none' stroke='black'/><text "
                  "x='%g' y='%g' text-anchor='middle'>%s</text><text x='%g' y='%g'>%.3g</text>"
                  "<text x='%g' y='%g' text-anchor='end'>%.3g</text><text x='%g' y='%g' "
                  "text-anchor='end'>%.2f</text>\n",
                  ox, oy, pw, ph, ox + pw / 2, oy - 6, plots::xml_escape(layers[li]).c_str(), ox,
                  oy + ph + 14, lo, ox + pw, oy + ph + 14, hi, ox - 4, oy + 8, top);
    f << b;
    for (size_t k = 0; k < hs.size(); ++k) {
      const json& h = (*hs[k])["hist"];
      const std::vector<double> c = h["counts"];
      const double hlo = h["lo"], hhi = h["hi"];
      double n = 0;
      for (double v : c) n += v;
      f << "<polyline fill='none' stroke='" << kColors[k] << "' stroke-width='1.3' points='";
      for (size_t i = 0; i < c.size(); ++i) {
        const double centre = hlo + (hhi - hlo) * (double(i) + 0.5) / double(c.size());
        std::snprintf(b, sizeof b, "%.1f,%.1f ", ox + (centre - lo) / (hi - lo) * pw,
                      oy + ph - (n > 0 ? c[i] / n : 0) / top * ph);
        f << b;
      }
      f << "'/>\n";
    }
  }
  f << "</svg>\n";
  write_file_atomically(path, "plot: " + brief(path), f.str());
}
}  // namespace

std::vector<std::string> write_instrument_pictures(const std::vector<json>& records,
                                                   const std::string& dir,
                                                   const std::vector<Finding>& findings) {
  const std::vector<const json*> w = watched(records);
  std::vector<std::string> written;
  const auto ratios = by_name(w, [](const json& r, double x, auto& m, auto& order) {
    for (const json& p : r["params"])
      if (p.value("dims", 0) >= 2 && p.contains("update_ratio") && !p["update_ratio"].is_null())
        add_point(m, order, p["name"], x, p["update_ratio"]);
  });
  write_lines_svg(dir + "/update_ratio.svg",
                  "update-to-data ratio per weight matrix, log10(std(dw) / std(w))",
                  "log10 update ratio", ratios, {{-3.0, "1e-3"}});
  written.push_back("update_ratio.svg");
  const auto norms = by_name(w, [](const json& r, double x, auto& m, auto& order) {
    for (const json& p : r["params"])
      if (!p["grad_norm"].is_null() && p["grad_norm"].get<double>() > 0)
        add_point(m, order, p["name"], x, std::log10(p["grad_norm"].get<double>()));
  });
  write_lines_svg(dir + "/grad_norm.svg", "gradient norm per parameter (before clipping)",
                  "log10 gradient norm", norms, {});
  written.push_back("grad_norm.svg");
  write_histograms_svg(dir + "/activations.svg", w);
  written.push_back("activations.svg");
  double max_keys = 0;
  const auto heads = by_name(w, [&](const json& r, double x, auto& m, auto& order) {
    for (const json& l : r["layers"])
      if (l.contains("entropy")) {
        const std::vector<double> e = l["entropy"];
        max_keys = std::max(max_keys, l["keys"].get<double>());
        for (size_t h = 0; h < e.size(); ++h)
          add_point(m, order, l["layer"].get<std::string>() + " head " + std::to_string(h), x,
                    e[h]);
      }
  });
  std::vector<std::pair<double, std::string>> guides;
  if (max_keys > 0)
    guides.push_back({std::log(max_keys),
                      "log(S) = uniform over the " + std::to_string(int64_t(max_keys)) + " keys"});
  write_lines_svg(dir + "/entropy.svg", "attention entropy per head (nats, mean over rows)",
                  "entropy (nats)", heads, guides);
  written.push_back("entropy.svg");

  std::ostringstream html;
  html << "<!doctype html>\n<html><head><meta charset='utf-8'><title>qkv run</title></head>\n"
          "<body style='font-family:sans-serif'>\n<h1>The run</h1>\n";
  std::error_code ec;
  if (std::filesystem::exists(dir + "/diverged.html", ec))  // trainer/diverged_page.h
    html << "<p style='background:#fde8e8;padding:.5em'>The run diverged: <a "
            "href='diverged.html'>which op made the first NaN or Inf</a>.</p>\n";
  for (const char* own : {"loss.svg", "attention.svg"})
    if (std::filesystem::exists(dir + "/" + own, ec)) html << "<p><img src='" << own << "'></p>\n";
  html << "<h2>Diagnosis (docs/instruments.md)</h2>\n<ul>\n";
  if (findings.empty()) html << "<li>no rule fired</li>\n";
  for (const Finding& f : findings) html << "<li>" << plots::xml_escape(f.text) << "</li>\n";
  html << "</ul>\n<h2>Instruments</h2>\n";
  for (const std::string& s : written) html << "<p><img src='" << s << "'></p>\n";
  html << "</body></html>\n";
  write_file_atomically(dir + "/index.html", "index: " + brief(dir + "/index.html"), html.str());
  written.push_back("index.html");
  return written;
}

bool finish_instruments(const Instruments& ins, const std::string& dir, int64_t diverged_at) {
  const std::vector<Finding> findings = diagnose(ins.records(), diverged_at);
  std::printf("diagnosis (--instruments %lld, docs/instruments.md): %s\n", (long long)ins.every(),
              findings.empty() ? "no rule fired" : "");
  for (const Finding& f : findings) std::printf("  %s\n", f.text.c_str());
  try {
    const std::vector<std::string> w = write_instrument_pictures(ins.records(), dir, findings);
    std::string list;
    for (const std::string& s : w) list += (list.empty() ? "" : ", ") + s;
    std::printf("instruments: %s/instruments.jsonl, %s\n", dir.c_str(), list.c_str());
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: %s\n", e.what());
    return false;
  }
}

}  // namespace qkv::train
