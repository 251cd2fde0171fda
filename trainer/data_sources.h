// Where a run's examples come from: one row per kind of data, found through
// one table (data_sources.cpp), each row filled by name in its own file, as
// families and position kinds are (trainer/family.h, trainer/positions.h):
//
//   source   file                       --format   chosen when               becomes
//   task     trainer/data_task.cpp      (none)     no --data                 pairs of --task
//   pairs    trainer/data_pairs.cpp     tsv        no other tsv row takes    (source, target)
//   labels   trainer/classify_data.cpp  tsv        --objective classify      (text, {label})
//   windows  trainer/text_data.cpp      text       no other text row takes   windows of tokens
//   lines    trainer/text_lines.cpp     text       --line-by-line            a line a sequence
//   images   trainer/image_data.cpp     idx        always                    (pixels, {label})
//   squad    trainer/qa_data.cpp        squad      always (a .json file)     question windows,
//                                                                           {start, end}
//
// Trainer::build_data asks the table for the run's row (data_source), lets
// it read the data into the Trainer (its pairs or text, the vocabulary, the
// labels, data_info) and then checks the longest sequence it reports against
// the position table. --format's values are the table's formats. A program
// (or a test) adds a kind of its own with register_data_source().
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/registry.h"
#include "trainer/config.h"

namespace qkv::data {
class Vocab;
}

namespace qkv::train {

class Trainer;

// The longest sequence a model input will hold, in positions (what the
// position table must cover), and where it is ("--context", "pairs.tsv:12").
struct DataNeed {
  int64_t tokens = 0;
  std::string where;
};

// The largest data file a source reads (1 GiB): a larger one is refused, naming it.
inline constexpr int64_t kMaxDataFileBytes = int64_t(1) << 30;

// A source's row, filled by name; every member left out keeps its default.
struct DataSource {
  const char* name = nullptr;  // "pairs": the table's name for it (errors, docs)
  const char* help = nullptr;  // what it reads, in a few words
  // The --format that reads it; "" for a run without --data (the built-in tasks).
  const char* format = "";
  // The objective its examples teach, for a family that has several and
  // whose --objective is unsaid (squad: qa); null: the family decides.
  const char* objective = nullptr;
  // A data file's ending that chooses this format when --format is not
  // given (squad: ".json"); null: only --format chooses it.
  const char* extension = nullptr;
  // What the format's files hold, as a family's reads and the settings ask
  // it (validate(), trainer/config.cpp): examples of the family's own shape
  // (pairs, labelled texts), a corpus of plain text (a language model reads
  // windows of it, bert's mlm its lines), or images. The rows of one format
  // say the same.
  enum class Holds { kExamples, kCorpus, kImages };
  Holds holds = Holds::kExamples;
  // Whether it, among the rows of its format, reads this run's data (labels:
  // --objective classify). Null: the format's general row, taking every run
  // of the format that no row with a `takes` takes.
  bool (*takes)(const TrainConfig& c) = nullptr;
  // The kind of tokens it reads whatever --tokens says (the built-in tasks:
  // "word", their symbols); null: --tokens (trainer/token_kinds.h).
  const char* tokens = nullptr;
  // Reads the data into `t` (t.pairs or t.text, t.vocab unless `given` is
  // the vocabulary, t.labels, t.data_info; t.cfg.context when it is 0 and
  // the source has a default) and says the longest input it made.
  DataNeed (*read)(Trainer& t, const data::Vocab* given) = nullptr;
};

// The built-in sources and any registered since, in the order of the table above.
const Registry<DataSource>& data_sources();
// The row that reads `c`'s data: c.data empty picks the "" format's row;
// otherwise the rows of c.format, a row whose `takes` says yes before the
// general one. An Error naming --format when no row reads the format.
const DataSource& data_source(const TrainConfig& c);
// What the files of `format` hold (its rows' `holds`); kExamples for "" (no
// --data) and for a format no row reads.
DataSource::Holds format_holds(const std::string& format);
// Whether `c`'s data is a corpus of plain text (--data given, its format's rows
// hold one): a language model's, or bert's mlm, or span corruption's.
bool reads_corpus(const TrainConfig& c);
// The format a row's `extension` gives `data` (a file name), or "" (no row's).
std::string format_of_file(const std::string& data);
// The objective the rows of `format` teach ("qa" for squad), or "".
std::string format_objective(const std::string& format);
// --format from the data file's ending when the command line did not say it.
void default_format(TrainConfig& c, const std::function<bool(const char*)>& said);
// "tsv, text or idx": the formats the table reads (--format's values).
std::string data_formats();
bool is_data_format(const std::string& format);
// --format's help: each format with its general source, "tsv (pairs), text
// (windows) or idx (images)".
std::string data_format_help();
// Adds a source (a program's own); throws when the name is taken.
// unregister_data_source removes it again (a test's source, when the test ends).
void register_data_source(const DataSource& s);
void unregister_data_source(const std::string& name);

}  // namespace qkv::train
