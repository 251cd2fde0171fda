// JsonBox: a JSON value held by a class whose header should not include
// nlohmann/json.hpp. That header costs about 1.5 s of compiling in every file
// that includes it, and 3 s in one that parses or prints JSON; a header
// included by most of the training program names the type through
// <nlohmann/json_fwd.hpp> and keeps its JSON members in boxes. Copies are
// deep, as a json member's are; a box starts null.
//
//   JsonBox info;                  // (trainer/trainer.h: Trainer::data_info)
//   *info = {{"kind", "text"}};    // in a file that includes nlohmann/json.hpp
//   if (info->contains("valid")) ...
#pragma once
#include <memory>

#include <nlohmann/json_fwd.hpp>

namespace qkv {

class JsonBox {
 public:
  JsonBox();
  JsonBox(const JsonBox& other);
  JsonBox(JsonBox&& other);  // leaves `other` null JSON (it allocates, so not noexcept)
  JsonBox& operator=(const JsonBox& other);
  JsonBox& operator=(JsonBox&& other) noexcept;
  ~JsonBox();

  nlohmann::json& operator*() { return *value_; }
  const nlohmann::json& operator*() const { return *value_; }
  nlohmann::json* operator->() { return value_.get(); }
  const nlohmann::json* operator->() const { return value_.get(); }

 private:
  std::unique_ptr<nlohmann::json> value_;  // never a null pointer
};

}  // namespace qkv
