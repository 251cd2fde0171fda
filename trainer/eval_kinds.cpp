#include "trainer/eval_kinds.h"

#include <cstdarg>
#include <cstdio>

#include "trainer/trainer.h"

namespace qkv::train {

// Each built-in kind's row, filled in its own file.
EvalKind labels_eval();     // trainer/classify_report.cpp
EvalKind masked_eval();     // trainer/eval_masked.cpp
EvalKind text_eval();       // trainer/eval_text.cpp
EvalKind sequences_eval();  // trainer/eval_sequences.cpp
EvalKind qa_eval();         // trainer/eval_qa.cpp

namespace {
Registry<EvalKind>& eval_table() {
  static Registry<EvalKind> t{
      "register_eval_kind",
      {labels_eval(), masked_eval(), text_eval(), sequences_eval(), qa_eval()}};
  return t;
}
}  // namespace

const Registry<EvalKind>& eval_kinds() { return eval_table(); }

const EvalKind& eval_kind(const Trainer& t) {
  const EvalKind* general = nullptr;
  for (const EvalKind& k : eval_table()) {
    if (!k.takes)
      general = general ? general : &k;
    else if (k.takes(t))
      return k;
  }
  if (!general) throw Error("evaluation: no kind scores a run of the " + t.cfg.model + " model");
  return *general;
}

std::string printed(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, format, again);
  va_end(again);
  return s;
}

EvalCells answer_cells(const EvalResult& r) {
  return EvalCells{std::to_string(r.exact_acc()), std::to_string(r.token_acc()),
                   std::to_string(r.loss), std::to_string(r.bleu), ""};
}

EvalCells text_cells(const EvalResult& r) {
  return EvalCells{"", "", std::to_string(r.loss), "", std::to_string(r.bits_per_byte)};
}

void register_eval_kind(const EvalKind& k) { eval_table().add(k); }

void unregister_eval_kind(const std::string& name) { eval_table().remove(name); }

}  // namespace qkv::train
