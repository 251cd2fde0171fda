// Parsing JSON that came from a file or a user, with its nesting bounded.
//
// nlohmann's parser does not recurse, but much of what is done with the value
// it builds does: printing it (dump, and so every error message quoting it),
// comparing and copying it recurse once per level, so a value nested 100,000
// levels deep (a 233 KB checkpoint metadata entry) overflows the stack. This
// parser refuses such nesting while it parses, before the tree is built deeper
// than the limit, so no deep value ever exists.
//
//   json cfg = parse_json_bounded(md.at("model_config"), path + ": metadata 'model_config'");
//
// Every JSON text qkv reads from a file goes through it: safetensors headers
// (io/safetensors.cpp) and the JSON held in their metadata (nn::metadata_json).
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace qkv {

// Deep enough for any metadata qkv writes (its configs, vocabularies and data
// descriptions nest at most 3 levels) and shallow enough to print and compare.
inline constexpr int kMaxJsonDepth = 64;

// Called for every object key as it is read, with its depth (1 for the keys of
// the top-level object); the safetensors header uses it to find duplicate
// tensor names, which nlohmann would silently merge.
using JsonKeyHook = std::function<void(int depth, const std::string& key)>;

// Parses `text` as one JSON value. Throws qkv::Error
//   "<where> is not valid JSON (<the parser's message, brief>)" or
//   "<where> nests lists or objects deeper than <max_depth> levels"
// (the top-level value is level 1: [[1]] nests 2 levels).
nlohmann::json parse_json_bounded(std::string_view text, const std::string& where,
                                  int max_depth = kMaxJsonDepth, const JsonKeyHook& on_key = {});

}  // namespace qkv
