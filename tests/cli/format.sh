# Every C++ file is formatted as .clang-format says (Google's style, 100
# columns): `make format` applies it; this test names the files it would
# change. clang-format comes from Debian's clang-format (make test installs it).
source "$(dirname "$0")/lib.bash"
cd "$QKV_SRC"
command -v clang-format >/dev/null || fail "clang-format is not installed (apt-get install clang-format; make test installs it)"
mapfile -t files < <(git ls-files '*.cpp' '*.h' 2>/dev/null || find core io autograd nn optim models generation checkpoint data dist explorer trainer examples bench tests fuzz -name '*.cpp' -o -name '*.h')
[ "${#files[@]}" -gt 50 ] || fail "found only ${#files[@]} C++ files"
# One clang-format over every file (4x less CPU than one process per file);
# only when it finds something are the files checked one by one, to name them.
bad=()
if ! clang-format --dry-run --Werror "${files[@]}" >/dev/null 2>&1; then
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  [ "${#bad[@]}" -gt 0 ] || fail "clang-format failed on the files together but on none alone"
fi
[ "${#bad[@]}" -eq 0 ] || fail "${#bad[@]} files not formatted (run make format): ${bad[*]:0:8}$([ "${#bad[@]}" -gt 8 ] && echo ' ...')"
echo "${#files[@]} files formatted"
