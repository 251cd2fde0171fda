// One table of named rows: the shape of every choice qkv offers by name (the
// model families, their file codecs and answerers, decoding methods,
// optimizers, norms, ...). The built-in rows come first, in the order help
// lists them; a program adds rows of its own at run time and may remove them
// again (a test's family, when the test ends).
//
//   Registry<NormKind> t("norm", {{"layer", ...}, {"rms", ...}});
//   t.find("rms")            the row, or nullptr
//   t.at("x", "--norm")      the row, or Error "--norm: expected layer or rms, got 'x'"
//   t.names()                "layer or rms" (t.names("'"): "'layer' or 'rms'")
//   t.add(row)               Error "norm: a row named 'rms' exists" when the name is taken
//   t.remove("rms")          nothing when there is no such row
//
// A row's name is its member `name` (a const char*), or the member the second
// template argument names: Registry<ModelCodec, &ModelCodec::kind>.
//
// The rows live in a vector: a pointer or reference to a row (find, at, a
// range-for) holds until the next add or remove, which may move them. Keep
// a row's name, not its address, across a registration.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace qkv {

template <class Row, const char* Row::*Name = &Row::name>
class Registry {
 public:
  Registry(std::string what, std::initializer_list<Row> rows) : what_(std::move(what)) {
    for (const Row& r : rows) add(r);
  }

  const std::vector<Row>& rows() const { return rows_; }
  typename std::vector<Row>::const_iterator begin() const { return rows_.begin(); }
  typename std::vector<Row>::const_iterator end() const { return rows_.end(); }
  size_t size() const { return rows_.size(); }
  const Row& operator[](size_t i) const { return rows_[i]; }

  const Row* find(const std::string& name) const {
    for (const Row& r : rows_)
      if (name == r.*Name) return &r;
    return nullptr;
  }

  // The row named `name`; an Error "<where>: expected a, b or c, got '<name>'".
  const Row& at(const std::string& name, const std::string& where) const {
    if (const Row* r = find(name)) return *r;
    throw Error(where + ": expected " + names() + ", got '" + brief(name) + "'");
  }

  // "a, b or c", each name between `quote`s.
  std::string names(const std::string& quote = "") const {
    return one_of(
        rows_, [](const Row& r) { return r.*Name; }, quote);
  }

  void add(const Row& row) {
    if (row.*Name == nullptr || *(row.*Name) == '\0') throw Error(what_ + ": a row needs a name");
    if (find(row.*Name)) throw Error(what_ + ": a row named '" + brief(row.*Name) + "' exists");
    rows_.push_back(row);
  }

  void remove(const std::string& name) {
    rows_.erase(
        std::remove_if(rows_.begin(), rows_.end(), [&](const Row& r) { return name == r.*Name; }),
        rows_.end());
  }

 private:
  std::string what_;  // "family", "norm", ...: the errors' first word
  std::vector<Row> rows_;
};

}  // namespace qkv
