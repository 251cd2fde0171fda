#include "checkpoint/checkpoint.h"

#include <unordered_map>

#include "core/error.h"

namespace qkv::nn {

NamedTensors state_dict(const Module& m) {
  NamedTensors out;
  for (const auto& [name, v] : m.named_parameters()) out.emplace_back(name, v.data());
  return out;
}

void load_state_dict(Module& m, const TensorFile& f, const std::string& prefix) {
  LoadOptions options;
  options.prefix = prefix;
  load_state_dict(m, f, options);
}

void load_state_dict(Module& m, const TensorFile& f, const LoadOptions& options) {
  const std::string& prefix = options.prefix;
  auto fail = [&](const std::string& msg) { throw Error("load: " + brief(f.path) + ": " + msg); };
  std::unordered_map<std::string, const Tensor*> in_file;  // full name in the file -> tensor
  for (const auto& [name, t] : f.tensors)
    if (name.compare(0, prefix.size(), prefix) == 0) in_file.emplace(name, &t);

  // Check everything first: a failed load leaves every parameter untouched.
  // Every missing and unexpected name is gathered, so that one message says
  // what the file lacks and what it holds beyond the model.
  auto params = m.named_parameters();
  std::vector<const Tensor*> src(params.size());
  std::vector<std::string> missing, unexpected;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string full = prefix + params[i].first;
    auto it = in_file.find(full);
    if (it == in_file.end())  // a file written before the parameter was renamed
      for (const auto& [now, before] : kRenamedParameters)
        if (params[i].first.compare(0, now.size(), now) == 0)
          it = in_file.find(prefix + before + params[i].first.substr(now.size()));
    if (it == in_file.end()) {
      missing.push_back(full);
      continue;
    }
    const Tensor& t = *it->second;
    if (t.shape() != params[i].second.shape())
      fail("tensor '" + brief(full) + "' has shape " + to_string(t.shape()) +
           " but the model expects " + to_string(params[i].second.shape()));
    src[i] = &t;
    in_file.erase(it);
  }
  for (const auto& [name, t] : f.tensors)  // in file order, so the message is stable
    if (in_file.count(name)) unexpected.push_back(name);
  // "missing tensor 'a'", "missing 5 tensors: 'a', 'b', 'c' and 2 more"
  auto names = [](const char* what, const std::vector<std::string>& v) {
    std::string s = v.size() == 1
                        ? std::string(what) + " tensor "
                        : std::string(what) + " " + std::to_string(v.size()) + " tensors: ";
    for (size_t i = 0; i < v.size() && i < 3; ++i) s += (i ? ", '" : "'") + brief(v[i]) + "'";
    if (v.size() > 3) s += " and " + std::to_string(v.size() - 3) + " more";
    return s;
  };
  if (!missing.empty() || !unexpected.empty())
    fail(missing.empty()      ? names("unexpected", unexpected)
         : unexpected.empty() ? names("missing", missing)
                              : names("missing", missing) + "; " + names("unexpected", unexpected));
  if (!options.allow_nonfinite) {
    NamedTensors taken;  // the tensors about to be copied, under their names in the file
    for (size_t i = 0; i < params.size(); ++i)
      taken.emplace_back(prefix + params[i].first, *src[i]);
    check_finite(taken, "load: " + f.path);
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].second.data().copy_(*src[i]);
}

SharedLoad load_shared(Module& m, const TensorFile& f, const LoadOptions& options) {
  const std::string& prefix = options.prefix;
  std::unordered_map<std::string, const Tensor*> in_file;  // full name in the file -> tensor
  for (const auto& [name, t] : f.tensors)
    if (name.compare(0, prefix.size(), prefix) == 0) in_file.emplace(name, &t);
  SharedLoad r;
  auto params = m.named_parameters();
  std::vector<std::pair<Tensor*, const Tensor*>> copies;  // (parameter, file tensor)
  NamedTensors taken;
  for (auto& [name, p] : params) {
    const auto it = in_file.find(prefix + name);
    if (it == in_file.end()) {
      r.fresh.push_back(name);
      continue;
    }
    if (it->second->shape() != p.shape()) {
      r.reshaped.push_back(name + " " + to_string(it->second->shape()) + " -> " +
                           to_string(p.shape()));
    } else {
      r.loaded.push_back(name);
      copies.emplace_back(&p.data(), it->second);
      taken.emplace_back(it->first, *it->second);
    }
    in_file.erase(it);
  }
  for (const auto& [name, t] : f.tensors)  // in file order
    if (in_file.count(name)) r.unused.push_back(name.substr(prefix.size()));
  if (r.loaded.empty())
    throw Error("load: " + brief(f.path) + ": shares no tensor (by name and shape) with the model");
  if (!options.allow_nonfinite) check_finite(taken, "load: " + f.path);
  for (auto& [dst, from] : copies) dst->copy_(*from);
  return r;
}

void save(const Module& m, const std::string& path, const Metadata& metadata,
          const SaveOptions& options) {
  const NamedTensors tensors = state_dict(m);
  if (!options.allow_nonfinite) check_finite(tensors, "save: " + path);  // before any file exists
  write_safetensors(path, tensors, metadata);
}

Metadata load(Module& m, const std::string& path, const LoadOptions& options) {
  TensorFile f = read_safetensors(path);
  load_state_dict(m, f, options);
  return std::move(f.metadata);
}

}  // namespace qkv::nn
