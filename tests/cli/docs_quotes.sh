# The numbers the docs quote from a program's output are the ones it prints
# now: each block marked <!-- quoted from: PROGRAM ARGS --> in README.md and
# docs/*.md is checked against PROGRAM's output, number by number, at the
# precision quoted (tests/cli/docs_quotes.py says how). Left out, with their
# reasons: float32 rounding gaps (their digits differ between AVX2 and
# AVX-512; the pages give their size in words), timings and the page's size
# in KB (the machine's, Graphviz's version), and figures from training runs
# and benchmarks (README.md, docs/training.md, BENCHMARKS.md: minutes to
# reproduce; each says how it was measured). docs/figures/explorer.png is
# the browser test's screenshot (tests/cli/explorer_browser.sh).
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
python3 "$QKV_SRC/tests/cli/docs_quotes.py" "$QKV_BIN" "$QKV_SRC/README.md" "$QKV_SRC"/docs/*.md
# The check can fail: a quote one digit off, or a number the program does
# not print, is named.
sed 's/out = 2\.2689/out = 2.2690/; s/(out = 2\.3302)/(out = 2.3302, 7.25)/' \
  "$QKV_SRC/docs/step-through.md" > stale.md
expect_fail python3 "$QKV_SRC/tests/cli/docs_quotes.py" "$QKV_BIN" stale.md
expect_out "stale.md:"
expect_out ": 2.2690 is not in the output of \`step_through --part 1\`"
expect_out ": 7.25 is not in the output of \`step_through --part 1\`"
expect_out "2 stale"
