// The training instruments of a finished run, on demand: reads
// <run>/instruments.jsonl (written by train --instruments N), prints the
// diagnosis and redraws the pictures and index.html into the run's folder
// (docs/instruments.md).
//
//   build/rel-f32/instruments runs/reverse
//
// Exit status 0 when no rule fired, 2 when one did, 1 on an error.
#include <cstdio>
#include <string>

#include "trainer/diagnosis.h"
#include "trainer/instruments.h"
#include "trainer/instruments_plots.h"

int main(int argc, char** argv) {
  using namespace qkv::train;
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: instruments RUN_DIR\n  reads RUN_DIR/instruments.jsonl (train "
                 "--instruments N), prints the diagnosis, redraws the pictures and index.html\n");
    return argc == 2 ? 0 : 1;
  }
  try {
    const std::string dir = argv[1];
    const auto records = read_instruments(dir + "/instruments.jsonl");
    const std::vector<Finding> findings = diagnose(records);
    std::printf("diagnosis (docs/instruments.md): %s\n", findings.empty() ? "no rule fired" : "");
    for (const Finding& f : findings) std::printf("  %s\n", f.text.c_str());
    std::string list;
    for (const std::string& s : write_instrument_pictures(records, dir, findings))
      list += (list.empty() ? "" : ", ") + s;
    std::printf("wrote %s/%s\n", dir.c_str(), list.c_str());
    return findings.empty() ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
