// Module checkpoints: a model's parameters as a safetensors file, under the
// same dotted names as named_parameters() (PyTorch's state_dict names), e.g.
//   encoder.layers.0.self_attn.w_q.weight
//
//   nn::save(model, "model.safetensors", {{"step", "1000"}});
//   Metadata md = nn::load(model, "model.safetensors");
#pragma once
#include <string>

#include "nn/module.h"
#include "nn/safetensors.h"

namespace qkv::nn {

// name -> parameter data, in named_parameters() order. The tensors share
// storage with the parameters (no copy). Tied weights appear once.
NamedTensors state_dict(const Module& m);

// Copies tensors from `f` into m's parameters, in place (copy_), so Vars held
// elsewhere (an optimizer's) stay valid. Strict: every parameter must be in
// the file as prefix + name with the same shape, and no tensor named with the
// prefix may be left over; with a non-empty prefix, tensors not starting with
// it are ignored. All or nothing: everything is checked before any parameter
// changes. Errors read "load: <file>: missing tensor '<name>'",
// "load: <file>: unexpected tensor '<name>'" and
// "load: <file>: tensor '<name>' has shape (3,4) but the model expects (4,3)".
void load_state_dict(Module& m, const TensorFile& f, const std::string& prefix = "");

// Writes state_dict(m) (as F32) and `metadata` atomically (write_safetensors).
void save(const Module& m, const std::string& path, const Metadata& metadata = {});
// Reads `path` strictly into m (load_state_dict, no prefix); returns its metadata.
Metadata load(Module& m, const std::string& path);

}  // namespace qkv::nn
