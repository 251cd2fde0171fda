// The step-through programs' printing (examples/step_through.cpp,
// examples/worked_example.cpp): banners, rows of numbers, and one quantity
// from several sources (by hand, the engine, finite differences) side by
// side. Every line fits an 80-column terminal.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "examples/by_hand.h"

namespace qkv::step {

inline void banner(const std::string& title) {
  const std::string bar(78, '=');
  std::printf("\n%s\n %s\n%s\n", bar.c_str(), title.c_str(), bar.c_str());
}

inline void section(const std::string& title) {
  std::string line = "--- " + title + " ";
  if (line.size() < 78) line += std::string(78 - line.size(), '-');
  std::printf("\n%s\n", line.c_str());
}

// One row of numbers: "[ 0.3655 -0.1345]".
inline std::string row_text(const Mat& m, int64_t i, int prec = 4) {
  std::string s = "[";
  char buf[32];
  for (int64_t j = 0; j < m.cols; ++j) {
    // A number that prints as zero prints without a sign: no "-0.0000".
    const double v = std::fabs(m(i, j)) < 0.5 * std::pow(10.0, -prec) ? 0.0 : m(i, j);
    std::snprintf(buf, sizeof buf, "%*.*f", prec + 3, prec, v);
    s += (j ? " " : "") + std::string(buf);
  }
  return s + "]";
}

inline std::vector<std::string> rows_of(const Mat& m, int prec = 4) {
  std::vector<std::string> lines;
  for (int64_t i = 0; i < m.rows; ++i) lines.push_back(row_text(m, i, prec));
  return lines;
}

inline std::string shape_text(const Mat& m) {
  return "(" + std::to_string(m.rows) + "," + std::to_string(m.cols) + ")";
}

// One quantity from several sources (by hand, the engine, a finite
// difference): side by side when the columns fit in 80, else one above the other.
using Column = std::pair<std::string, const Mat*>;
inline void compare(const std::vector<Column>& cols) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : cols) rows.push_back(rows_of(*c.second));
  const std::string shape = shape_text(*cols[0].second);
  const size_t width = rows[0][0].size();
  if (14 + cols.size() * (width + 3) <= 80) {
    std::string head = "     " + std::string(7, ' ');
    for (size_t k = 0; k < cols.size(); ++k)
      head += " " + (k + 1 < cols.size()
                         ? cols[k].first + std::string(width + 2 - cols[k].first.size(), ' ')
                         : cols[k].first);
    std::printf("%s\n", head.c_str());
    for (size_t i = 0; i < rows[0].size(); ++i) {
      std::printf("     %-7s", i ? "" : shape.c_str());
      for (size_t k = 0; k < rows.size(); ++k)
        std::printf(" %s%s", rows[k][i].c_str(), k + 1 < rows.size() ? "  " : "");
      std::printf("\n");
    }
    return;
  }
  for (size_t k = 0; k < cols.size(); ++k)
    for (size_t i = 0; i < rows[k].size(); ++i)
      std::printf("     %-7s %-8s %s\n", i || k ? "" : shape.c_str(),
                  i ? "" : cols[k].first.c_str(), rows[k][i].c_str());
}

// Two matrices of the same height side by side under their titles.
inline void side_by_side(const std::string& left, const Mat& a, const std::string& right,
                         const Mat& b) {
  std::printf("\n   %-34s %s\n", left.c_str(), right.c_str());
  for (int64_t i = 0; i < a.rows; ++i)
    std::printf("   %-34s %s\n", row_text(a, i).c_str(), row_text(b, i).c_str());
}

// Largest gaps seen so far: engine vs by hand, by hand vs finite differences.
struct Gaps {
  double engine = 0, fd = 0;
};

// One quantity: its formula, a remark, then its value by hand, by the engine
// and by finite differences (when given).
inline void step_row(const std::string& formula, const std::string& why, const Mat& hand,
                     const Mat& engine, const Mat* fd, Gaps& gaps) {
  std::printf("\n   %s\n", formula.c_str());
  if (!why.empty()) std::printf("     (%s)\n", why.c_str());
  std::vector<Column> cols{{"by hand", &hand}, {"engine", &engine}};
  if (fd) cols.push_back({"fin.diff", fd});
  compare(cols);
  gaps.engine = std::max(gaps.engine, max_gap(engine, hand));
  if (fd) gaps.fd = std::max(gaps.fd, max_gap(hand, *fd));
}

inline void step_row(const std::string& formula, const std::string& why, const Mat& hand,
                     const Tensor& engine, const Mat* fd, Gaps& gaps) {
  step_row(formula, why, hand, to_mat(engine), fd, gaps);
}

// The largest gaps of a part, the lines tests/cli/step_through.sh bounds.
inline void print_gaps(const Gaps& gaps, bool with_fd) {
  std::printf("\n   max |engine - by hand| over all of the above: %.1e\n", gaps.engine);
  if (with_fd) std::printf("   max |by hand - fin.diff| over all of the above: %.1e\n", gaps.fd);
}

}  // namespace qkv::step
