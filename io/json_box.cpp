// JsonBox (io/json_box.h).
#include "io/json_box.h"

#include <nlohmann/json.hpp>

namespace qkv {

JsonBox::JsonBox() : value_(std::make_unique<nlohmann::json>()) {}
JsonBox::JsonBox(const JsonBox& other) : value_(std::make_unique<nlohmann::json>(*other)) {}
JsonBox::JsonBox(JsonBox&& other) : JsonBox() { value_.swap(other.value_); }
JsonBox& JsonBox::operator=(const JsonBox& other) {
  *value_ = *other;
  return *this;
}
JsonBox& JsonBox::operator=(JsonBox&& other) noexcept {
  value_.swap(other.value_);
  return *this;
}
JsonBox::~JsonBox() = default;

}  // namespace qkv
