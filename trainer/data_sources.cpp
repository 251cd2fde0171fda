#include "trainer/data_sources.h"

#include <algorithm>
#include <vector>

namespace qkv::train {

// Each built-in source's row, filled in its own file.
DataSource task_source();    // trainer/data_task.cpp
DataSource pairs_source();   // trainer/data_pairs.cpp
DataSource labels_source();  // trainer/classify_data.cpp
DataSource text_source();    // trainer/text_data.cpp
DataSource lines_source();   // trainer/text_lines.cpp
DataSource images_source();  // trainer/image_data.cpp
DataSource squad_source();   // trainer/qa_data.cpp

namespace {
Registry<DataSource>& source_table() {
  static Registry<DataSource> t{"register_data_source",
                                {task_source(), pairs_source(), labels_source(), text_source(),
                                 lines_source(), images_source(), squad_source()}};
  return t;
}

// The formats in the table's order, each once ("" left out: it takes no flag).
std::vector<std::string> formats() {
  std::vector<std::string> f;
  for (const DataSource& s : source_table())
    if (*s.format && std::find(f.begin(), f.end(), s.format) == f.end()) f.push_back(s.format);
  return f;
}
}  // namespace

const Registry<DataSource>& data_sources() { return source_table(); }

const DataSource& data_source(const TrainConfig& c) {
  const std::string format = c.data.empty() ? "" : c.format;
  const DataSource* general = nullptr;
  for (const DataSource& s : source_table()) {
    if (format != s.format) continue;
    if (!s.takes)
      general = general ? general : &s;
    else if (s.takes(c))
      return s;
  }
  if (general) return *general;
  throw Error("--format: expected " + data_formats() + ", got '" + brief(c.format) + "'" +
              (is_data_format(format) ? " (no source of it reads this run's settings)" : ""));
}

DataSource::Holds format_holds(const std::string& format) {
  for (const DataSource& s : source_table())
    if (format == s.format) return s.holds;
  return DataSource::Holds::kExamples;
}

bool reads_corpus(const TrainConfig& c) {
  return !c.data.empty() && format_holds(c.format) == DataSource::Holds::kCorpus;
}

std::string format_of_file(const std::string& data) {
  for (const DataSource& s : source_table()) {
    if (!s.extension) continue;
    const std::string e = s.extension;
    if (data.size() > e.size() && data.compare(data.size() - e.size(), e.size(), e) == 0)
      return s.format;
  }
  return "";
}

std::string format_objective(const std::string& format) {
  for (const DataSource& s : source_table())
    if (format == s.format && s.objective) return s.objective;
  return "";
}

void default_format(TrainConfig& c, const std::function<bool(const char*)>& said) {
  if (said("format")) return;
  if (const std::string f = format_of_file(c.data); !f.empty()) c.format = f;
}

std::string data_formats() {
  return one_of(formats(), [](const std::string& f) { return f; });
}

bool is_data_format(const std::string& format) {
  const std::vector<std::string> f = formats();
  return std::find(f.begin(), f.end(), format) != f.end();
}

std::string data_format_help() {
  return one_of(formats(), [](const std::string& f) {
    for (const DataSource& s : source_table())
      if (f == s.format && !s.takes) return f == s.name ? f : f + " (" + s.name + ")";
    return f;
  });
}

void register_data_source(const DataSource& s) {
  for (const DataSource& r : source_table())
    if (std::string(r.format) == s.format && r.holds != s.holds)
      throw Error(std::string("register_data_source: '") + s.name + "' reads --format " + s.format +
                  " as " + r.name + " does, but says its files hold something else");
  source_table().add(s);
}

void unregister_data_source(const std::string& name) { source_table().remove(name); }

}  // namespace qkv::train
