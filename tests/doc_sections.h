// "Derived in" links: an op's Node::doc() names a section of a docs/ page,
// "docs/page.md#anchor". derived_in_problem() says what is wrong with such a
// link for an op, or returns "" when the link is good:
//   - the page exists and the anchor is the slug of one of its headings
//     (GitHub's rule: lower case, spaces to '-', punctuation other than '-'
//     and '_' dropped), fenced code blocks aside;
//   - the section under that heading (up to the next heading of its level or
//     above) names the op as a code span, `name`, in its heading or text;
//   - and it holds the op's one-line backward rule word for word, so the page
//     derives exactly the rule the code implements and the explorer shows.
#pragma once
#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace qkv::testing {

inline std::string heading_slug(const std::string& heading) {
  std::string s;
  for (char c : heading) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_')
      s += static_cast<char>(std::tolower(u));
    else if (c == ' ')
      s += '-';
  }
  return s;
}

inline std::string derived_in_problem(const std::string& link, const std::string& op_name,
                                      const std::string& backward_rule,
                                      const std::string& root = ".") {
  const size_t hash = link.find('#');
  if (hash == std::string::npos) return "the link " + link + " names no section (#anchor)";
  const std::string page = link.substr(0, hash), anchor = link.substr(hash + 1);
  std::ifstream in(root + "/" + page);
  if (!in) return "the page " + page + " does not exist";
  std::vector<std::string> lines;
  for (std::string s; std::getline(in, s);) lines.push_back(s);
  bool fenced = false;
  size_t start = lines.size(), level = 0;
  for (size_t i = 0; i < lines.size() && start == lines.size(); ++i) {
    if (lines[i].rfind("```", 0) == 0) fenced = !fenced;
    if (fenced || lines[i].empty() || lines[i][0] != '#') continue;
    const size_t n = lines[i].find_first_not_of('#');
    if (n == std::string::npos || lines[i][n] != ' ') continue;
    if (heading_slug(lines[i].substr(n + 1)) == anchor) start = i, level = n;
  }
  if (start == lines.size()) return page + " has no heading whose anchor is #" + anchor;
  std::string section = lines[start] + "\n";
  fenced = false;
  for (size_t i = start + 1; i < lines.size(); ++i) {
    if (lines[i].rfind("```", 0) == 0) fenced = !fenced;
    if (!fenced && !lines[i].empty() && lines[i][0] == '#') {
      const size_t n = lines[i].find_first_not_of('#');
      if (n != std::string::npos && lines[i][n] == ' ' && n <= level) break;
    }
    section += lines[i] + "\n";
  }
  if (section.find("`" + op_name + "`") == std::string::npos)
    return page + "#" + anchor + " does not name `" + op_name + "`";
  if (section.find(backward_rule) == std::string::npos)
    return page + "#" + anchor + " does not state the rule \"" + backward_rule + "\"";
  return "";
}

}  // namespace qkv::testing
