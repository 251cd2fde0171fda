# A language model keeps its best: the checkpoint of the lowest held-out loss
# is written beside --save's file, reproduces that loss, survives a resume, is
# named in the report with the rise past it, and --patience stops early.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
# Random word lines: a 2-layer model at a high learning rate learns the word
# frequencies in a few steps, then memorises the training lines, so held-out
# loss bottoms early and rises.
python3 -c "
import random
r = random.Random(1)
w = 'the cat sat on a mat and dog ran to big red box'.split()
print('\n'.join(' '.join(r.choice(w) for _ in range(8)) for _ in range(60)))" > words.txt
lm=(--model gpt --data words.txt --format text --tokens word --context 16 --d-model 32 --layers 2
  --heads 2 --d-ff 64 --batch 16 --lr 1e-2 --warmup 1 --eval-every 5 --threads 1)

expect_ok "$TRAIN" "${lm[@]}" --steps 60 --out run
cp "$QKV_TMP/out" full.out
# The best loss and its step, from log.csv's held-out rows (step,...,heldout_loss).
best_of() { awk -F, 'NR > 1 && $8 != "" && (n++ == 0 || $8 < b) {b = $8; s = $1}
  END {printf "%d %.4f\n", s, b}' "$1"; }
# The losses as printed (log.csv has 6 decimals: rounding it again could differ).
loss_at() { sed -n "s/^  held-out at step $1: loss \([0-9.]*\),.*/\1/p" "$2"; }
read -r best_step _ < <(best_of run/log.csv)
best_loss=$(loss_at "$best_step" full.out)
last_loss=$(loss_at 60 full.out)
[ -n "$best_loss" ] && [ -n "$last_loss" ] || fail "no held-out lines at steps $best_step and 60"
[ "$best_step" -lt 40 ] || fail "no rise to test: the best held-out loss is at step $best_step"
expect_out "best held-out loss $best_loss at step $best_step: run/model.best.safetensors"
expect_out "held-out loss rose from $best_loss (step $best_step) to $last_loss (step 60): the best checkpoint is run/model.best.safetensors"
expect_out "checkpoint: run/model.safetensors (step 60)"
# The best file is a whole checkpoint of that step and reproduces the loss.
expect_ok "$TRAIN" --load run/model.best.safetensors --eval-only
expect_out "from step $best_step"
expect_out "held-out (32 tokens): loss $best_loss,"

# Resumed, the run keeps its best: a later, worse evaluation does not replace
# it. (The run to 30 steps has its own cosine schedule, so its own numbers.)
expect_ok "$TRAIN" "${lm[@]}" --steps 30 --out half
read -r half_step _ < <(best_of half/log.csv)
half_loss=$(loss_at "$half_step" "$QKV_TMP/out")
expect_ok "$TRAIN" --load half/model.safetensors --steps 60 --eval-every 5 --threads 1 --out half
expect_out "held-out at step 35: loss"
read -r all_step all_loss < <(best_of half/log.csv)  # the log holds both parts
[ "$all_step" -le 30 ] || fail "no test of the resume: the resumed run found a new best at step $all_step"
expect_out "(best $half_loss at step $half_step)"
expect_out "best held-out loss $half_loss at step $half_step: half/model.best.safetensors"
expect_ok "$TRAIN" --load half/model.best.safetensors --eval-only
expect_out "from step $half_step"
expect_out "loss $half_loss,"

# tools/qkv_checkpoint.py passes the key through; a bad value is refused by name.
export PYTHONPATH="$QKV_SRC/tools${PYTHONPATH:+:$PYTHONPATH}"
python3 - <<'PY' || fail "tools/qkv_checkpoint.py could not copy best_heldout"
import json
import qkv_checkpoint as qc
t, md = qc.read("half/model.safetensors")
qc.write("copy.safetensors", t, md)
md["best_heldout"] = json.dumps({"loss": 1.5, "step": 99})
qc.write("bad.safetensors", t, md)
PY
cmp -s copy.safetensors half/model.safetensors || fail "tools/qkv_checkpoint.py changed the checkpoint's bytes"
expect_fail "$TRAIN" --load bad.safetensors --eval-only
expect_out "bad.safetensors: metadata 'best_heldout' must be {\"loss\": a finite number >= 0, \"step\": an integer in [0, 60]}, got {\"loss\":1.5,\"step\":99}"

# --patience 2: stops two evaluations after the best, and says so.
expect_ok "$TRAIN" "${lm[@]}" --steps 60 --patience 2 --out patient
stop=$((best_step + 10))
expect_out "no new best held-out loss in 2 evaluations (best $best_loss at step $best_step): stopping early (--patience)"
expect_out "checkpoint: patient/model.safetensors (step $stop)"
# --no-early-stop overrides it; a negative value is refused by name.
expect_ok "$TRAIN" "${lm[@]}" --steps 60 --patience 2 --no-early-stop --no-save --out free
expect_out "trained 60 steps"
expect_fail "$TRAIN" "${lm[@]}" --patience -1
expect_out "--patience: must be >= 0 (0: never stop early), got -1"

# The best file's path is checked before any work, like --save's.
mkdir -p blocked/model.best.safetensors
expect_fail "$TRAIN" "${lm[@]}" --steps 5 --out blocked
expect_out "--save (its best held-out checkpoint) blocked/model.best.safetensors"
[ ! -e blocked/model.safetensors ] || fail "a run whose best file cannot be written trained anyway"

# The final evaluation is a candidate too: at step 23, after the checks at
# 10 and 20, a model still learning (lr 1e-3) beats them, so the best file
# is the final model and says so (before: "use the final checkpoint" at
# best, and a best file worse than the run's own checkpoint).
late=(--model gpt --data words.txt --format text --tokens word --context 16 --d-model 32 --layers 2
  --heads 2 --d-ff 64 --batch 16 --lr 1e-3 --warmup 1 --eval-every 10 --threads 1)
expect_ok "$TRAIN" "${late[@]}" --steps 23 --out late
expect_out "at step 23 (the final evaluation): late/model.best.safetensors"
expect_ok "$TRAIN" --load late/model.best.safetensors --eval-only
expect_out "from step 23"
