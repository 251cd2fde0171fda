# run_all: alone (it times writing the page (under 2 s))
# step_through --html: the explorer page for parts 1 and 2 is one self-contained
# file (no external script, style or link to fetch) of at most 3 MB, written in
# under 2 s, whose float64 finite differences all pass; a path that cannot be
# written is refused in one line before any work.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
expect_fail "$QKV_BIN/step_through" --html no/such/dir/page.html
expect_out "--html no/such/dir/page.html: the directory no/such/dir does not exist"
[ "$(wc -l < "$QKV_TMP/out")" = 1 ] || fail "the error is not one line: $(cat "$QKV_TMP/out")"
mkdir ro && chmod 500 ro
if [ ! -w ro ]; then  # root writes anywhere
  expect_fail "$QKV_BIN/step_through" --html ro/page.html
  expect_out "cannot write files in ro"
fi
start=$(date +%s%N)
expect_ok "$QKV_BIN/step_through" --html page.html
ms=$(( ($(date +%s%N) - start) / 1000000 ))
expect_out "every number in float64"
expect_out "Part 2: a 1+1-layer Transformer"
grep -q " 0 fail" "$QKV_TMP/out" || fail "finite differences failed: $(cat "$QKV_TMP/out")"
bytes=$(stat -c %s page.html)
[ "$bytes" -le $((3 * 1024 * 1024)) ] || fail "page.html is $bytes bytes, over 3 MB"
[ "$ms" -lt 2000 ] || fail "writing the page took $ms ms, not under 2 s"
# Self-contained: nothing is fetched (no src= or href= to another file or host).
! grep -Eo '<(script|link|img)[^>]*(src|href)=' page.html || fail "the page loads an external file"
[ ! -e page.html.tmp ] || fail "the temporary file was left behind"
echo "page.html: $bytes bytes in $ms ms"
