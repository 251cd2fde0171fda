// Running another program (Graphviz's dot, a benchmark's own child) without a
// shell: the arguments go to it as they are, so no file or folder name (a
// $TMPDIR holding an apostrophe, or `x';touch PWNED;'`) is ever read as a
// command.
//
//   const ProgramRun r = run_program({"dot", "-Tsvg", "graph.dot"});
//   if (r.status != 0) throw Error("dot failed: " + r.err);
#pragma once
#include <string>
#include <vector>

namespace qkv {

// The full path of the program `name` as execvp finds it on $PATH (a name
// holding '/' is taken as it is), or "" when there is none: `command -v`
// without a shell.
std::string find_program(const std::string& name);

// What a finished program did: its exit status (128 + N when killed by
// signal N) and everything it wrote to stdout and stderr.
struct ProgramRun {
  int status = -1;
  std::string out, err;
};

// Runs argv[0] (looked up on $PATH) with arguments argv[1..], stdin from
// /dev/null, and waits for it. Throws Error naming the program when it cannot
// be started (not found, not executable).
ProgramRun run_program(const std::vector<std::string>& argv);

}  // namespace qkv
