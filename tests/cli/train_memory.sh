# What the final report will hold is checked before training (a run once
# trained, then failed with "cannot allocate 26.9 GB"), and its long phases
# say how far they are (QKV_PROGRESS_SECONDS=0: a line at every chunk).
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"

# The held-out pairs as the evaluation reads them (at most 16,384 tokens a
# chunk: 264 pairs of up to 62 here), through a feed-forward block 65,536
# wide: training's batch of one fits, the final report's chunks do not:
# refused at once, nothing trained or written.
expect_fail "$TRAIN" --max-len 30 --min-len 3 --d-ff 65536 --d-model 16 --heads 2 --layers 1 \
  --batch 1 --steps 1 --warmup 0 --threads 1 --out big
expect_out "error: the final report evaluates the held-out pairs 264 at a time, up to 34 tokens long: with --attention standard that needs about"
grep -q "^step" out && fail "trained before refusing what the final report cannot fit"
[ -e big ] && fail "a refused run left its --out folder"

# Progress lines for the final evaluation and the length generalization.
QKV_PROGRESS_SECONDS=0 expect_ok "$TRAIN" "${TINY[@]}" --steps 5 --out small
expect_out "final evaluation (greedy): 0 of 50 sequences, "
expect_out "length generalization: 0 of 200 sequences, "
# Long sequences are evaluated in chunks bounded in tokens (trainer/evaluate.cpp,
# kEvalChunkTokens), so a line comes before the whole set is done, not only
# between chunks of 500.
QKV_PROGRESS_SECONDS=0 expect_ok "$TRAIN" "${TINY[@]}" --min-len 150 --max-len 200 --steps 1 --out long
grep -qE "final evaluation \(greedy\): [1-4][0-9] of 50 sequences" "$QKV_TMP/out" ||
  { cat "$QKV_TMP/out"; fail "no progress line within the held-out set of long sequences"; }
# ... and none at the default interval for a phase that ends within it.
expect_ok "$TRAIN" "${TINY[@]}" --steps 5 --out small2
grep -q "of 50 sequences" out && fail "a progress line for a phase shorter than the interval"
true
