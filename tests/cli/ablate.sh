# make ablate's harness (tools/ablate.py): its statistics, verdicts and table on
# canned results (tests/cli/ablate_test.py), then one tiny end-to-end run of two
# rows with one seed and a few steps, a row whose flag the trainer may lack,
# and a second start that resumes from the runs already written.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
command -v python3 >/dev/null || fail "python3 is needed by tools/ablate.py"

# 1. The verdict logic on canned results (overlapping spreads -> not separable, ...).
expect_ok python3 "$QKV_SRC/tests/cli/ablate_test.py"

# 2. End to end, on a slice of the translation task so that it takes seconds.
mkdir task
head -n 400 "$QKV_SRC/datasets/translation/train.tsv" >task/train.tsv
head -n 40 "$QKV_SRC/datasets/translation/valid.tsv" >task/valid.tsv
head -n 40 "$QKV_SRC/datasets/translation/long.tsv" >task/long.tsv
ablate() {
  python3 "$QKV_SRC/tools/ablate.py" --rows E,B-dk4 --seeds 1 --steps 20 --eval-every 10 --jobs 2 \
    --bin "$QKV_BIN/train" --task "$QKV_TMP/task" --results "$QKV_TMP/results" \
    --report "$QKV_TMP/ABLATIONS.md" --plots "$QKV_TMP/plots" --command "tests/cli/ablate.sh"
}
expect_ok ablate
expect_out "3 rows x 1 seeds = 3 runs of 20 steps, 2 at once"
grep -Eq '^\[  [0-9]/3\] base +seed 1: ppl [0-9.]+, BLEU [0-9.]+, exact [0-9.]+% \([0-9]+ s\)$' out ||
  { cat out; fail "no progress line for the base row"; }
grep -Eq '^\[  [0-9]/3\] E-learned +seed 1: ppl ' out || { cat out; fail "no progress line for E-learned"; }
expect_out "E1  not judged"  # one seed is never enough for a verdict
for r in base E-learned B-dk4; do
  [ -f "results/$r/1/result.json" ] || fail "no result.json for $r"
done
[ -f results/base/1/log.csv ] || fail "the trainer's log.csv is not kept beside its result"
python3 - <<'PY' || fail "result.json lacks the run's figures"
import json, math
r = json.load(open("results/base/1/result.json"))
assert r["status"] == "ok", r
assert r["steps_done"] == 20 and r["exit_code"] == 0, r
assert math.isfinite(r["ppl"]) and r["ppl"] > 1 and 0 <= r["bleu"] <= 100, r
PY
# The trainer lacks --d-k until it lands: the row says so; once it has the flag, the row runs.
# (The help is read whole first: grep -q stopping early would end train with
# SIGPIPE, which pipefail counts as the pipeline failing.)
if "$TRAIN" --help >train_help.txt && grep -q -- "--d-k" train_help.txt; then
  grep -Eq '^\[  [0-9]/3\] B-dk4 +seed 1: ppl ' out || { cat out; fail "B-dk4 did not run"; }
else
  expect_out "B-dk4           seed 1: not run: the trainer has no flag --d-k"
  grep -F "| B-dk4 |" ABLATIONS.md | grep -qF "not run: the trainer has no flag --d-k (seed 1)" ||
    fail "the report does not show why B-dk4 has no result"
fi
# The report: header, a table row per row of Table 3 and more, a line per claim, the plots.
grep -q "^- machine: .*cores, \`grep -c avx512f /proc/cpuinfo\` = [0-9]" ABLATIONS.md ||
  fail "the report lacks the machine"
grep -q "^Written by \`tests/cli/ablate.sh\`" ABLATIONS.md || fail "the report lacks the command"
grep -Eq '^\| base \| 2 \| 64 \| 256 \| 8 \| 8 \| 0.1 \| 0.1 \|.*\| [0-9.]+ ± 0.000 \(1\) \|.*\| 4.92 \| 25.8 \|$' \
  ABLATIONS.md || { grep "| base" ABLATIONS.md; fail "the base row lacks its figures"; }
grep -qF "| C-N1 |" ABLATIONS.md || fail "a row not run is missing from the table"
grep -qF "**E1: not judged.**" ABLATIONS.md || fail "no verdict line for E1"
grep -qF "](plots/E.svg)" ABLATIONS.md || fail "the report does not show the E plot"
[ "$(grep -c "<polyline" plots/E.svg)" -ge 4 ] || fail "plots/E.svg lacks the two rows' curves"

# 3. A second start resumes: nothing that was written is run again ...
expect_ok ablate
expect_out "base            seed 1: ppl"
grep -q "base .*(reused)$" out || { cat out; fail "the base run was not reused"; }
grep -q "E-learned .*(reused)$" out || { cat out; fail "the E-learned run was not reused"; }
# ... and a run whose result is missing (interrupted) runs again, alone.
rm results/E-learned/1/result.json
expect_ok ablate
grep -q "base .*(reused)$" out || fail "base was run again"
grep -Eq "E-learned +seed 1: ppl .*\([0-9]+ s\)$" out || { cat out; fail "E-learned was not run again"; }

# 4. What the harness writes, with fake trainers (instant): a copy of the script
# in a scratch tree holding a copy of the committed report, so that its default
# report path is that copy and the real ABLATIONS.md is never touched.
mkdir -p tree/tools tree/docs/ablations
cp "$QKV_SRC/tools/ablate.py" "$QKV_SRC/tools/ablate_lm.py" "$QKV_SRC/tools/ablate_reverse.py" tree/tools/
cp "$QKV_SRC/ABLATIONS.md" tree/
cp "$QKV_SRC"/docs/ablations/*.svg tree/docs/ablations/
cp -r tree committed
printf '#!/bin/sh\necho "step 1: loss 3.0"\nkill -SEGV $$\n' >crash && chmod +x crash
cat >fine <<'SH' && chmod +x fine
#!/bin/sh
echo "trained 1 steps in 0.1 s (1.0 ms/step, 10 target tokens/s)"
echo "  per-token perplexity 5.000 (cross-entropy 1.6094, teacher-forced)"
echo "  greedy:                 exact-sequence accuracy  10.00%, token accuracy  20.00%, BLEU  5.00 (0.1 s)"
SH
fake() {  # fake BIN RESULTS [more flags]: rows base and E-learned, one seed, one step
  local bin=$1 res=$2; shift 2
  python3 tree/tools/ablate.py --rows E --seeds 1 --steps 1 --jobs 2 --bin "$QKV_TMP/$bin" \
    --task "$QKV_TMP/task" --results "$QKV_TMP/$res" "$@"
}
same_as_committed() { diff -r committed tree >/dev/null || fail "$1"; }
# Every training crashes (a signal, not an interruption): exit non-zero, the
# committed report and plots stay as they were.
expect_fail fake crash r-crash
expect_out "crashed (signal SIGSEGV)"
expect_out "ablate: 2 of 2 runs crashed"
same_as_committed "a run whose every training crashed replaced the committed report"
# A trial of fewer steps and seeds than the committed report holds does not replace it.
expect_ok fake fine r-fine
expect_out "ABLATIONS.md not replaced: it holds 3 seeds of 1000 steps"
same_as_committed "a 1-step trial replaced the committed report"
# Named explicitly, the report is written (reusing the runs) with its plots beside it;
# crashed rows are listed as crashed and give no figures or verdicts.
expect_ok fake fine r-fine --report "$QKV_TMP/tree/ABLATIONS.md"
grep -q "(reused)" out || fail "the runs were not reused"
grep -qF "| 5.000 ± 0.000 (1) |" tree/ABLATIONS.md || fail "the named report was not written"
! diff -q committed/docs/ablations/E.svg tree/docs/ablations/E.svg >/dev/null ||
  fail "the named default report's plots were not written"
expect_fail fake crash r-crash --report "$QKV_TMP/own.md"
grep -F "| base |" own.md | grep -qF "incomplete: crashed (signal SIGSEGV)" ||
  { cat own.md; fail "a crashed row is not listed as such"; }
grep -qF "| base |" own.md && ! grep -F "| base |" own.md | grep -qF "± " ||
  fail "a crashed row has figures"
grep -qF "**E1: not judged.** " own.md || fail "E1 was judged from crashed rows"
[ -f ablations/E.svg ] || fail "the plots of a named report do not go beside it"
# A --task folder lacking its files is an error naming them; nothing is written into it.
mkdir usertask && cp task/valid.tsv usertask/
expect_fail fake fine r-user --task "$QKV_TMP/usertask"
expect_out "lacks train.tsv"
[ "$(ls usertask)" = valid.tsv ] && cmp -s usertask/valid.tsv task/valid.tsv ||
  fail "the harness wrote into the --task folder"
