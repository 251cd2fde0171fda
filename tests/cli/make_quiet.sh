# `make step` and `make demo` build quietly: one "building ..." line, then the
# program's output, no compiler command line (`make V=1 step` shows them).
# Run with a stand-in compiler into a scratch build directory, so nothing is
# compiled: it writes each -o file, and a "linked" program says its name.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
cat > cxx <<'SH'
#!/bin/sh
out=
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
[ -n "$out" ] || exit 0
case "$out" in
  *.o) : > "$out" ;;
  *) printf '#!/bin/sh\necho "%s ran"\n' "${out##*/}" > "$out"; chmod +x "$out" ;;
esac
SH
chmod +x cxx
build="$QKV_TMP/build/rel-f32"
run_make() {
  env -u MAKEFLAGS -u MFLAGS make -C "$QKV_SRC" --no-print-directory DEPS=0 CXX="$QKV_TMP/cxx" \
    BUILD="$QKV_TMP/build" "$@"
}
for goal in step:step_through demo:train; do
  expect_ok run_make "${goal%%:*}"
  [ "$(head -1 out)" = "building $build/${goal#*:} ..." ] ||
    fail "make ${goal%%:*} does not start with one \"building\" line: $(head -3 out)"
  grep -q -- "-std=c++17" out && fail "make ${goal%%:*} echoed compiler lines: $(head -3 out)"
  expect_out "${goal#*:} ran"
done
rm "$build/step_through" "$build/examples/step_through.o"
expect_ok run_make step V=1
expect_out "-c examples/step_through.cpp -o $build/examples/step_through.o"
