// Module checkpoints: a model's parameters as a safetensors file, under the
// same dotted names as named_parameters() (PyTorch's state_dict names), e.g.
//   encoder.layers.0.self_attn.w_q.weight
//
//   nn::save(model, "model.safetensors", {{"step", "1000"}});
//   Metadata md = nn::load(model, "model.safetensors");
//
// Both refuse NaN and Inf unless told otherwise (SaveOptions, LoadOptions):
//   nn::LoadOptions inspect;
//   inspect.allow_nonfinite = true;
//   nn::load(model, "diverged.safetensors", inspect);
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "io/safetensors.h"

namespace qkv::nn {

// name -> parameter data, in named_parameters() order. The tensors share
// storage with the parameters (no copy). Tied weights appear once.
NamedTensors state_dict(const Module& m);

// Parameters renamed since files were first written, as (name prefix now,
// name prefix before): load_state_dict takes a parameter missing under its
// name from the tensor under its old one, so every file ever written loads.
//   lm_head.  <- generator.   the encoder-decoder's output layer (one name with the GPT's)
inline const std::vector<std::pair<std::string, std::string>> kRenamedParameters = {
    {"lm_head.", "generator."}};

// How load_state_dict and load treat a file.
struct LoadOptions {
  // Each parameter is taken from the tensor named prefix + its name; tensors
  // not starting with a non-empty prefix are ignored (a training checkpoint
  // holding "model." and "optim." tensors loads with prefix "model.").
  std::string prefix;
  // NaN or Inf in a tensor to be loaded is refused by default: the Error names
  // the file, the tensor and the first bad element. Set this to load such a
  // checkpoint anyway, e.g. to inspect where a diverged run went wrong.
  bool allow_nonfinite = false;
};

// Copies tensors from `f` into m's parameters, in place (copy_), so Vars held
// elsewhere (an optimizer's) stay valid. Strict: every parameter must be in
// the file as prefix + name with the same shape and, unless
// options.allow_nonfinite, finite values; no tensor named with the prefix may
// be left over; with a non-empty prefix, tensors not starting with it are
// ignored (and not checked). All or nothing: everything is checked before any
// parameter changes. Errors read "load: <file>: missing tensor '<name>'",
// "load: <file>: unexpected tensor '<name>'",
// "load: <file>: tensor '<name>' has shape (3,4) but the model expects (4,3)" and
// "load: <file>: tensor '<name>' holds nan at index (0,2) of shape (4,3) (1 non-finite value in
// it)". (For other tensors of the same file, e.g. optimizer state, use check_finite(f) from
// io/safetensors.h.)
void load_state_dict(Module& m, const TensorFile& f, const LoadOptions& options);
// Fine-tuning a model from another's file (the trainer's --init-from): every
// parameter whose name (prefix + name) and shape the file shares is copied;
// the others keep their fresh values and are listed, as are the file's
// tensors the model has no use for. Values must be finite unless
// options.allow_nonfinite. Nothing is copied when nothing is shared: an
// Error names the file (a file of another model altogether).
struct SharedLoad {
  std::vector<std::string> loaded;    // copied from the file
  std::vector<std::string> fresh;     // the model's own, not in the file
  std::vector<std::string> reshaped;  // in the file under the name, but another shape: fresh
  std::vector<std::string> unused;    // the file's (under the prefix), not the model's
};
SharedLoad load_shared(Module& m, const TensorFile& f, const LoadOptions& options);
// load_state_dict(m, f, LoadOptions{prefix}): finite values required.
void load_state_dict(Module& m, const TensorFile& f, const std::string& prefix = "");

// How save treats a model.
struct SaveOptions {
  // A parameter holding NaN or Inf is refused by default: nothing is written
  // and the Error names the path, the tensor and the first bad element, so a
  // diverged model never silently replaces a good checkpoint. Set this to
  // write it anyway (for a post-mortem).
  bool allow_nonfinite = false;
};

// Writes state_dict(m) (as F32) and `metadata` atomically (write_safetensors).
// Errors for a non-finite parameter read
// "save: <path>: tensor '<name>' holds inf at index (1,0) of shape (2,2) (1 non-finite value in
// it)".
void save(const Module& m, const std::string& path, const Metadata& metadata = {},
          const SaveOptions& options = {});
// Reads `path` strictly into m (load_state_dict with `options`); returns its metadata.
Metadata load(Module& m, const std::string& path, const LoadOptions& options = {});

}  // namespace qkv::nn
