// The diagnosis rules of trainer/diagnosis.h, one function each.
#include "trainer/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

namespace qkv::train {

using json = nlohmann::json;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[200];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}
// The records of watched steps (those with "params"), in order.
std::vector<const json*> watched(const std::vector<json>& records) {
  std::vector<const json*> out;
  for (const json& r : records)
    if (r.contains("params")) out.push_back(&r);
  return out;
}

// Rule 1: each weight matrix's median update ratio over the records.
void rule_update_ratio(const std::vector<const json*>& w, const DiagnosisThresholds& th,
                       std::vector<Finding>& out) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> ratios;
  for (const json* r : w)
    for (const json& p : (*r)["params"]) {
      if (p.value("dims", 0) < 2 || !p.contains("update_ratio") || p["update_ratio"].is_null())
        continue;
      const std::string n = p["name"];
      if (!ratios.count(n)) order.push_back(n);
      ratios[n].push_back(p["update_ratio"].get<double>());
    }
  int64_t fired = 0;
  for (const std::string& n : order) {
    const double m = median(ratios[n]);
    if (std::abs(m - th.ratio_centre) <= th.ratio_decades) continue;
    if (++fired > 3) continue;  // three named, the rest counted below
    out.push_back({1, "rule 1: " + n + ": update-to-data ratio 10^" + fmt("%.2f", m) +
                          " (median of " + std::to_string(ratios[n].size()) + " records), " +
                          (m > th.ratio_centre ? "above" : "below") + " the band 10^" +
                          fmt("%.1f", th.ratio_centre - th.ratio_decades) + "..10^" +
                          fmt("%.1f", th.ratio_centre + th.ratio_decades) + ": " +
                          (m > th.ratio_centre ? "the learning rate is too high for it"
                                               : "it barely learns (learning rate too low?)")});
  }
  if (fired > 3)
    out.push_back(
        {1, "rule 1: and " + std::to_string(fired - 3) + " more weight matrices outside the band"});
}

// Rule 2 and rule 3: the layers at the last watched step.
void rule_layers(const std::vector<const json*>& w, const DiagnosisThresholds& th,
                 std::vector<Finding>& out) {
  if (w.empty()) return;
  const json& last = *w.back();
  const std::string at = " at step " + std::to_string(last["step"].get<int64_t>());
  for (const json& l : last.value("layers", json::array())) {
    const std::string name = l.value("layer", "?");
    if (l.value("kind", "") == "ffn" && l.value("dead", 0.0) > th.dead_fraction)
      out.push_back({2, "rule 2: " + name + ": " + fmt("%.1f", 100 * l["dead"].get<double>()) +
                            "% of its " + l.value("activation", "") + " units dead" + at +
                            " (threshold " + fmt("%.0f", 100 * th.dead_fraction) + "%)"});
    if (l.value("kind", "") == "attention" && l.contains("entropy") &&
        l.value("keys", int64_t(0)) >= th.collapsed_min_keys) {
      const std::vector<double> e = l["entropy"];
      for (size_t h = 0; h < e.size(); ++h)
        if (e[h] < th.collapsed_nats)
          out.push_back({3, "rule 3: " + name + " head " + std::to_string(h) + ": entropy " +
                                fmt("%.3f", e[h]) + " nats" + at + ", below " +
                                fmt("%.2f", th.collapsed_nats) + " (uniform over its " +
                                std::to_string(l["keys"].get<int64_t>()) + " keys: " +
                                fmt("%.2f", std::log(double(l["keys"].get<int64_t>()))) +
                                "): it looks at one key only"});
    }
  }
}

// Rule 4: a spike of the global gradient norm.
void rule_spike(const std::vector<const json*>& w, int64_t diverged_at,
                const DiagnosisThresholds& th, std::vector<Finding>& out) {
  std::vector<double> before;
  for (const json* r : w) {
    if (!(*r).contains("grad_norm") || (*r)["grad_norm"].is_null()) continue;
    const double g = (*r)["grad_norm"];
    if (int64_t(before.size()) >= th.spike_min_before) {
      const double m = median(before);
      if (m > 0 && g > th.spike_factor * m) {
        out.push_back(
            {4,
             "rule 4: gradient norm " + fmt("%.3g", g) + " at step " +
                 std::to_string((*r)["step"].get<int64_t>()) + ", " + fmt("%.0f", g / m) +
                 " times the median " + fmt("%.3g", m) + " of the records before it (threshold " +
                 fmt("%.0f", th.spike_factor) + " times)" +
                 (diverged_at > 0 ? ", before the divergence at step " + std::to_string(diverged_at)
                                  : std::string())});
        return;
      }
    }
    before.push_back(g);
  }
  // A divergence so fast that fewer records came before it: the norm's growth.
  if (diverged_at > 0 && before.size() >= 2 && before.front() > 0 &&
      before.back() > th.spike_factor * before.front())
    out.push_back({4, "rule 4: gradient norm grew from " + fmt("%.3g", before.front()) + " to " +
                          fmt("%.3g", before.back()) + " (" +
                          fmt("%.0f", before.back() / before.front()) + " times; threshold " +
                          fmt("%.0f", th.spike_factor) + ") before the divergence at step " +
                          std::to_string(diverged_at)});
}

// Rule 5: the held-out loss rose past its best (keep-best's check).
void rule_heldout(const std::vector<json>& records, std::vector<Finding>& out) {
  double best = 0, last = 0;
  int64_t best_step = -1, last_step = -1;
  for (const json& r : records) {
    if (!r.contains("heldout_loss") || r["heldout_loss"].is_null()) continue;
    last = r["heldout_loss"];
    last_step = r["step"];
    if (best_step < 0 || last < best) {  // keep_best: a new best is strictly lower
      best = last;
      best_step = last_step;
    }
  }
  if (heldout_rose(best, best_step, last, last_step))
    out.push_back({5, "rule 5: held-out loss rose from its best " + fmt("%.4f", best) + " (step " +
                          std::to_string(best_step) + ") to " + fmt("%.4f", last) + " (step " +
                          std::to_string(last_step) +
                          "): over-fitting, or a learning rate too high late in the run; the "
                          "best checkpoint is the one to keep"});
}
}  // namespace

std::vector<Finding> diagnose(const std::vector<json>& records, int64_t diverged_at,
                              const DiagnosisThresholds& th) {
  std::vector<Finding> out;
  const std::vector<const json*> w = watched(records);
  for (const json& r : records)  // a run that diverged wrote {"step", "diverged": true}
    if (diverged_at == 0 && r.value("diverged", false)) diverged_at = r["step"].get<int64_t>();
  rule_update_ratio(w, th, out);
  rule_layers(w, th, out);
  rule_spike(w, diverged_at, th, out);
  rule_heldout(records, out);
  return out;
}

}  // namespace qkv::train
