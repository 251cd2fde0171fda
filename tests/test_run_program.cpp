// Running a program without a shell (io/run_program.h): its arguments reach it
// as they are, whatever quotes or semicolons they hold.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "io/run_program.h"
#include "tests/errors.h"
#include "tests/temp_dir.h"

using namespace qkv;
using namespace qkv::testing;

TEST_CASE(
    "run_program: captures stdout, stderr and the exit status; an argument holding quotes and "
    "a `;touch` reaches the program as one argument and runs nothing") {
  const ProgramRun r = run_program({"sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(r.status == 3);
  CHECK(r.out == "out\n");
  CHECK(r.err == "err\n");

  TempDir tmp;
  const std::string hostile = "x';touch " + tmp.file("PWNED") + ";'\"; touch " +
                              tmp.file("PWNED2") + " $(touch " + tmp.file("PWNED3") + ")";
  const ProgramRun p = run_program({"printf", "%s", hostile});
  CHECK(p.status == 0);
  CHECK(p.out == hostile);
  CHECK(std::filesystem::is_empty(tmp.dir));
}

TEST_CASE(
    "run_program: a program that is not on PATH is an error naming it; find_program looks PATH "
    "up as `command -v` does") {
  const std::string sh = find_program("sh");
  CHECK(!sh.empty());
  CHECK(sh.front() == '/');
  CHECK(access(sh.c_str(), X_OK) == 0);
  CHECK(find_program(sh) == sh);
  CHECK(find_program("qkv-no-such-program").empty());
  CHECK(find_program("").empty());
  CHECK(error_of([] {
          run_program({"qkv-no-such-program", "--x"});
        }) == "cannot run qkv-no-such-program: No such file or directory");
  const ProgramRun killed = run_program({"sh", "-c", "kill -TERM $$"});
  CHECK(killed.status == 128 + 15);
}
