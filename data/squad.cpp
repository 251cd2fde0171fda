// SQuAD's format, windows, the span search and the metrics (data/squad.h).
#include "data/squad.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_bounded.h"

namespace qkv::data {

namespace {

using nlohmann::json;

// The byte offset of character `chars` of UTF-8 `s` (its length: s.size());
// -1 past the end.
int64_t byte_of_char(const std::string& s, int64_t chars) {
  size_t i = 0;
  for (int64_t c = 0; c < chars; ++c) {
    if (i >= s.size()) return -1;
    i += std::max<size_t>(1, utf8_char_length(s, i));
  }
  return i <= s.size() ? static_cast<int64_t>(i) : -1;
}

const json& member(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw Error(where + ": expected a key '" + key + "'");
  return j.at(key);
}

std::string string_member(const json& j, const char* key, const std::string& where) {
  const json& v = member(j, key, where);
  if (!v.is_string()) throw Error(where + ": '" + key + "' is not a string");
  return v.get<std::string>();
}

}  // namespace

SquadFile parse_squad(const std::string& json_text, const std::string& where) {
  const json doc = parse_json_bounded(json_text, where);
  const json& data = member(doc, "data", where);
  if (!data.is_array()) throw Error(where + ": 'data' is not a list");
  SquadFile out;
  std::set<std::string> ids;
  for (size_t a = 0; a < data.size(); ++a) {
    const std::string at_article = where + ": data[" + std::to_string(a) + "]";
    const json& paragraphs = member(data[a], "paragraphs", at_article);
    if (!paragraphs.is_array()) throw Error(at_article + ": 'paragraphs' is not a list");
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string at_par = at_article + ".paragraphs[" + std::to_string(p) + "]";
      SquadParagraph par;
      par.context = string_member(paragraphs[p], "context", at_par);
      const json& qas = member(paragraphs[p], "qas", at_par);
      if (!qas.is_array()) throw Error(at_par + ": 'qas' is not a list");
      for (size_t q = 0; q < qas.size(); ++q) {
        SquadQuestion sq;
        sq.id = string_member(qas[q], "id", at_par + ".qas[" + std::to_string(q) + "]");
        const std::string at_q = where + ": question '" + brief(sq.id) + "'";
        if (!ids.insert(sq.id).second) throw Error(at_q + ": the id is used twice");
        if (par.context.find_first_not_of(" \t\r\n") == std::string::npos)
          throw Error(at_q + ": its context is empty");
        sq.question = string_member(qas[q], "question", at_q);
        if (sq.question.find_first_not_of(" \t\r\n") == std::string::npos)
          throw Error(at_q + ": the question is empty");
        if (qas[q].contains("is_impossible")) {
          if (!qas[q]["is_impossible"].is_boolean())
            throw Error(at_q + ": 'is_impossible' is not true or false");
          sq.impossible = qas[q]["is_impossible"].get<bool>();
        }
        const json& answers = member(qas[q], "answers", at_q);
        if (!answers.is_array()) throw Error(at_q + ": 'answers' is not a list");
        for (size_t k = 0; k < answers.size(); ++k) {
          SquadAnswer ans;
          ans.text =
              string_member(answers[k], "text", at_q + ": answers[" + std::to_string(k) + "]");
          const json& st = member(answers[k], "answer_start", at_q);
          if (!st.is_number_integer() || st.get<int64_t>() < 0)
            throw Error(at_q + ": answer_start is not a count of characters (" + brief(st.dump()) +
                        ")");
          const int64_t b = byte_of_char(par.context, st.get<int64_t>());
          if (ans.text.empty() || b < 0 ||
              par.context.compare(static_cast<size_t>(b), ans.text.size(), ans.text) != 0)
            throw Error(at_q + ": answer_start " + std::to_string(st.get<int64_t>()) +
                        " does not point at its text '" + brief(ans.text) +
                        "' (the context there: '" +
                        brief(b < 0 ? std::string()
                                    : par.context.substr(static_cast<size_t>(b), ans.text.size())) +
                        "')");
          ans.start = b;
          sq.answers.push_back(std::move(ans));
        }
        if (sq.impossible) {
          out.v2 = true;
          sq.answers.clear();  // v2 lists plausible answers apart; the gold is ""
        } else if (sq.answers.empty()) {
          throw Error(at_q +
                      ": no answers (an unanswerable question says \"is_impossible\": true)");
        }
        par.questions.push_back(std::move(sq));
        ++out.questions;
      }
      out.paragraphs.push_back(std::move(par));
    }
  }
  if (out.questions == 0) throw Error(where + ": no questions");
  return out;
}

std::vector<QaWindow> qa_windows(const Seq& question, const Seq& context, int64_t window,
                                 int64_t stride, int64_t answer_first, int64_t answer_last,
                                 int64_t cls_id, int64_t sep_id) {
  const int64_t Q = static_cast<int64_t>(question.size()), C = static_cast<int64_t>(context.size());
  const int64_t room = window - Q - 3;  // context tokens a window holds
  if (room < 1)
    throw Error("qa_windows: a question of " + std::to_string(Q) +
                " tokens leaves no room for the context in a window of " + std::to_string(window));
  if (stride >= room)
    throw Error("qa_windows: --doc-stride " + std::to_string(stride) + " is not below the " +
                std::to_string(room) + " context tokens a window of " + std::to_string(window) +
                " holds beside this question");
  std::vector<QaWindow> out;
  for (int64_t first = 0;; first += room - stride) {
    const int64_t n = std::min(room, C - first);
    QaWindow w;
    w.context_first = first;
    w.offset = Q + 2;
    w.ids.reserve(static_cast<size_t>(Q + n + 3));
    w.ids.push_back(cls_id);
    w.ids.insert(w.ids.end(), question.begin(), question.end());
    w.ids.push_back(sep_id);
    w.ids.insert(w.ids.end(), context.begin() + first, context.begin() + first + n);
    w.ids.push_back(sep_id);
    w.allowed.assign(w.ids.size(), 0);
    w.allowed[0] = 1;
    for (int64_t i = 0; i < n; ++i) w.allowed[static_cast<size_t>(w.offset + i)] = 1;
    if (answer_first >= first && answer_last < first + n && answer_first <= answer_last) {
      w.start = w.offset + answer_first - first;
      w.end = w.offset + answer_last - first;
    }
    out.push_back(std::move(w));
    if (first + n >= C) break;
  }
  return out;
}

std::pair<int64_t, int64_t> tokens_of_bytes(const std::vector<ByteSpan>& spans, int64_t begin,
                                            int64_t end) {
  int64_t first = -1, last = -1;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (spans[i].end <= begin || spans[i].begin >= end) continue;  // no overlap
    if (first < 0) first = static_cast<int64_t>(i);
    last = static_cast<int64_t>(i);
  }
  return {first, last};
}

Span best_span(const real* start, const real* end, const std::vector<uint8_t>& allowed,
               int64_t max_len) {
  Span best;
  best.score = -std::numeric_limits<double>::infinity();
  const int64_t T = static_cast<int64_t>(allowed.size());
  for (int64_t e = 1; e < T; ++e) {
    if (!allowed[static_cast<size_t>(e)]) continue;
    for (int64_t s = std::max<int64_t>(1, e - max_len + 1); s <= e; ++s) {
      if (!allowed[static_cast<size_t>(s)]) continue;
      const double score = double(start[s]) + double(end[e]);
      if (score > best.score) best = {s, e, score};
    }
  }
  return best;
}

std::string squad_normalize(std::string_view s) {
  // lower case, punctuation (ASCII, as Python's string.punctuation) removed,
  // the articles a, an, the removed as words, white space collapsed.
  std::string lowered;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x80 && std::ispunct(c)) continue;
    lowered += c < 0x80 ? static_cast<char>(std::tolower(c)) : ch;
  }
  std::istringstream words(lowered);
  std::string w, out;
  while (words >> w) {
    if (w == "a" || w == "an" || w == "the") continue;
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

double squad_exact(const std::string& prediction, const std::vector<std::string>& golds) {
  const std::string p = squad_normalize(prediction);
  if (golds.empty()) return p.empty() ? 1.0 : 0.0;
  for (const std::string& g : golds)
    if (squad_normalize(g) == p) return 1.0;
  return 0.0;
}

double squad_f1(const std::string& prediction, const std::vector<std::string>& golds) {
  auto words = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(squad_normalize(s));
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  const std::vector<std::string> p = words(prediction);
  if (golds.empty()) return p.empty() ? 1.0 : 0.0;
  double best = 0;
  for (const std::string& g : golds) {
    const std::vector<std::string> gw = words(g);
    if (p.empty() || gw.empty()) {  // SQuAD v2: 1 if both are empty, else 0
      best = std::max(best, p.empty() && gw.empty() ? 1.0 : 0.0);
      continue;
    }
    std::map<std::string, int64_t> count;
    for (const std::string& w : gw) ++count[w];
    int64_t common = 0;
    for (const std::string& w : p)
      if (auto it = count.find(w); it != count.end() && it->second > 0) {
        --it->second;
        ++common;
      }
    if (common == 0) continue;
    const double precision = double(common) / double(p.size());
    const double recall = double(common) / double(gw.size());
    best = std::max(best, 2 * precision * recall / (precision + recall));
  }
  return best;
}

}  // namespace qkv::data
