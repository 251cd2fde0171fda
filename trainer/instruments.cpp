// The training instruments (trainer/instruments.h): what each watched step
// records, and how. docs/instruments.md explains each number.
#include "trainer/instruments.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/output_file.h"

namespace qkv::train {

using json = nlohmann::json;

namespace {
// Every module's dotted name, as named_parameters() names their parameters
// ("" for the model itself).
void name_modules(const nn::Module& m, const std::string& prefix,
                  std::map<const nn::Module*, std::string>& out) {
  out.emplace(&m, prefix);
  for (const auto& [n, child] : m.children())
    name_modules(*child, prefix.empty() ? n : prefix + "." + n, out);
}

// Mean and standard deviation of n numbers, summed in double.
std::pair<double, double> mean_std(const real* x, int64_t n) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += x[i];
    s2 += double(x[i]) * x[i];
  }
  const double mean = n ? s / double(n) : 0;
  return {mean, std::sqrt(std::max(0.0, n ? s2 / double(n) - mean * mean : 0))};
}

// A histogram of n numbers over [min, max] in kHistogramBins bins.
json histogram(const real* x, int64_t n) {
  double lo = n ? x[0] : 0, hi = lo;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, double(x[i]));
    hi = std::max(hi, double(x[i]));
  }
  std::vector<int64_t> counts(kHistogramBins, 0);
  const double width = hi > lo ? (hi - lo) / kHistogramBins : 1;
  for (int64_t i = 0; i < n; ++i)
    counts[std::min<int64_t>(kHistogramBins - 1, int64_t((x[i] - lo) / width))]++;
  return {{"lo", lo}, {"hi", hi}, {"counts", counts}};
}

// A finite number, or null (JSON has no NaN or Inf).
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

Instruments::Instruments(nn::Module& model, int64_t every, const std::string& path, bool append,
                         int64_t resumed_at)
    : model_(model), every_(every), path_(path) {
  if (every <= 0)
    throw Error("--instruments " + std::to_string(every) +
                ": the steps between records must be positive");
  name_modules(model, "", names_);
  params_ = model.named_parameters();
  if (path.empty()) return;
  if (append) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) records_ = read_instruments(path);
    // The steps after the checkpoint come again: their old lines go.
    records_.erase(
        std::remove_if(records_.begin(), records_.end(),
                       [&](const json& r) { return r["step"].get<int64_t>() > resumed_at; }),
        records_.end());
  }
  file_.open(output_target(path, "--instruments " + brief(path)), std::ios::trunc);
  if (!file_) throw Error("--instruments: cannot open " + brief(path) + " for writing");
  for (const json& r : records_) file_ << r.dump() << '\n';  // the kept lines, written again
  file_.flush();
}

// The probe goes with it (Trainer declares `instruments` after the model,
// so the model is still alive here).
Instruments::~Instruments() { model_.set_probe(nullptr); }

std::string Instruments::name_of(const nn::Module& m) const {
  auto it = names_.find(&m);
  return it == names_.end() ? "?" : it->second;
}

void Instruments::watch(int64_t step) {
  step_ = step;
  params_json_ = json::array();
  layers_json_ = json::array();
  model_.set_probe(this);
}

void Instruments::unwatch() { model_.set_probe(nullptr); }

void Instruments::ffn_hidden(const nn::Module& m, const Tensor& pre, const Tensor& post,
                             nn::Activation act) {
  const int64_t F = pre.size(-1), N = pre.numel() / F;
  const auto [mean, sd] = mean_std(post.data(), post.numel());
  // A unit is dead when it is off for every token (trainer/instruments.h):
  // ReLU's input <= 0 (its output 0), GELU's below -3, SwiGLU's gate below -6.
  const double below = act == nn::Activation::ReLU   ? 0.0
                       : act == nn::Activation::GELU ? kGeluDeadBelow
                                                     : kSwigluDeadBelow;
  std::vector<real> top(F, -std::numeric_limits<real>::infinity());  // (F): max over tokens
  const real* p = pre.data();
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < F; ++j) top[j] = std::max(top[j], p[r * F + j]);
  int64_t dead = 0;
  for (int64_t j = 0; j < F; ++j)
    dead += act == nn::Activation::ReLU ? top[j] <= 0 : top[j] < below;
  layers_json_.push_back({{"layer", name_of(m)},
                          {"kind", "ffn"},
                          {"activation", nn::activation_name(act)},
                          {"mean", number(mean)},
                          {"std", number(sd)},
                          {"dead", N ? double(dead) / double(F) : 0.0},
                          {"units", F},
                          {"hist", histogram(post.data(), post.numel())}});
}

void Instruments::attention(const nn::Module& m, const Tensor& probs, const Tensor& out) {
  const auto [mean, sd] = mean_std(out.data(), out.numel());
  json line = {
      {"layer", name_of(m)}, {"kind", "attention"}, {"mean", number(mean)}, {"std", number(sd)}};
  if (probs.defined()) {  // (B, H, T, S)
    const int64_t B = probs.size(0), H = probs.size(1), T = probs.size(2), S = probs.size(3);
    std::vector<double> entropy(H, 0);  // per head: mean over rows of -sum_j p log p
    int64_t rows = 0, saturated = 0;
    std::vector<int64_t> head_rows(H, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < T; ++t) {
          const real* row = probs.data() + ((b * H + h) * T + t) * S;  // (S)
          double e = 0, top = 0, sum = 0;
          for (int64_t j = 0; j < S; ++j) {
            const double q = row[j];
            if (q > 0) e -= q * std::log(q);
            top = std::max(top, q);
            sum += q;
          }
          if (sum < 0.5) continue;  // a fully masked row (all zeros): no distribution
          entropy[h] += e;
          head_rows[h]++;
          rows++;
          saturated += top > kSaturatedMaxProb;
        }
    for (int64_t h = 0; h < H; ++h) entropy[h] /= double(std::max<int64_t>(1, head_rows[h]));
    line["entropy"] = entropy;
    line["keys"] = S;  // log(S): a uniform row's entropy
    line["saturated"] = rows ? double(saturated) / double(rows) : 0.0;
  }
  layers_json_.push_back(line);
}

void Instruments::gradients() {
  before_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Var& v = params_[i].second;
    double g2 = 0;
    if (v.grad().defined()) {
      const real* g = v.grad().data();
      for (int64_t k = 0; k < v.grad().numel(); ++k) g2 += double(g[k]) * g[k];
    }
    params_json_.push_back({{"name", params_[i].first}, {"grad_norm", number(std::sqrt(g2))}});
    if (!before_[i].defined() || before_[i].numel() != v.data().numel())
      before_[i] = Tensor::empty(v.data().shape());  // once per run: reused on every watched step
    before_[i].copy_(v.data());
  }
}

void Instruments::updated(double loss, double lr, double grad_norm) {
  for (size_t i = 0; i < params_.size() && i < params_json_.size(); ++i) {
    const Tensor& w = params_[i].second.data();
    const real* a = w.data();
    const real* b = before_[i].data();
    const int64_t n = w.numel();
    double d = 0, d2 = 0, s = 0, s2 = 0;  // dw = w - w_before; its and w_before's moments
    for (int64_t k = 0; k < n; ++k) {
      const double dw = double(a[k]) - b[k];
      d += dw;
      d2 += dw * dw;
      s += b[k];
      s2 += double(b[k]) * b[k];
    }
    const double sd_dw = std::sqrt(std::max(0.0, d2 / n - (d / n) * (d / n)));
    const double sd_w = std::sqrt(std::max(0.0, s2 / n - (s / n) * (s / n)));
    // log10(std(dw) / std(w)); null when w is constant (a LayerNorm gain at
    // its start) or did not move.
    params_json_[i]["update_ratio"] =
        sd_w > 0 && sd_dw > 0 ? number(std::log10(sd_dw / sd_w)) : json(nullptr);
    params_json_[i]["dims"] = w.dim();
  }
  write({{"step", step_},
         {"loss", number(loss)},
         {"lr", lr},
         {"grad_norm", number(grad_norm)},
         {"params", params_json_},
         {"layers", layers_json_}});
}

void Instruments::heldout(int64_t step, double loss) {
  // The final evaluation repeats an --eval-every one at the same step: one line.
  if (!records_.empty() && records_.back().contains("heldout_loss") &&
      records_.back()["step"] == step)
    return;
  write({{"step", step}, {"heldout_loss", number(loss)}});
}

void Instruments::diverged(int64_t step) { write({{"step", step}, {"diverged", true}}); }

void Instruments::write(const json& line) {
  records_.push_back(line);
  if (!file_.is_open()) return;
  file_ << line.dump() << '\n';
  file_.flush();  // a run that stops keeps every line it wrote
}

std::vector<json> read_instruments(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("instruments: cannot read " + brief(path));
  std::vector<json> out;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const std::exception&) {
      throw Error("instruments: " + brief(path) + ":" + std::to_string(n) + ": not a JSON line");
    }
    if (!out.back().is_object() || !out.back().contains("step"))
      throw Error("instruments: " + brief(path) + ":" + std::to_string(n) + ": no key 'step'");
  }
  return out;
}

}  // namespace qkv::train
