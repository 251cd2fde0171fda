#!/usr/bin/env bash
# train --model bert --objective qa: extractive question answering on a
# SQuAD-format file written here: each context is 20 to 40 filler words with
# one name among them, longer than the 32-token window, so a question reads
# as several windows overlapping by --doc-stride, only one of which holds the
# answer (the others point at [CLS]), and the best span over the windows
# maps back to the name's characters. A .json file is read as --format squad
# and bert's objective is qa by default; the run scores SQuAD's exact match
# and F1, the file saved evaluates again from another folder, and bad files
# are refused in one line naming the question id.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
python3 - <<'PY'
import json, random
rng = random.Random(5)
names = "Alice Bob Carol Dave Erin Frank Grace Heidi".split()
filler = "the cat sat near by a door on mat and".split()
def squad(n, tag):
    data = []
    for i in range(n):
        words = [rng.choice(filler) for _ in range(rng.randrange(20, 40))]
        at = rng.randrange(len(words) + 1)
        name = rng.choice(names)
        words.insert(at, name)
        start = len(" ".join(words[:at])) + (1 if at else 0)
        ctx = " ".join(words) + "."
        qas = [{"id": f"{tag}{i}", "question": "Who is in the text?",
                "answers": [{"text": name, "answer_start": start}]}]
        data.append({"title": str(i), "paragraphs": [{"context": ctx, "qas": qas}]})
    return {"version": "1.1", "data": data}
json.dump(squad(300, "t"), open("train.json", "w"))
json.dump(squad(40, "d"), open("dev.json", "w"))
bad = squad(3, "b")
bad["data"][2]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
json.dump(bad, open("bad_start.json", "w"))
v2 = squad(60, "v")  # SQuAD v2: every third context has no name, its question no answer
for k, d in enumerate(v2["data"]):
    if k % 3 == 0:
        p = d["paragraphs"][0]
        p["context"] = " ".join(w for w in p["context"].rstrip(".").split() if w not in names) + "."
        p["qas"][0].update({"is_impossible": True, "answers": []})
json.dump(v2, open("v2.json", "w"))
dup = squad(3, "u")
dup["data"][1]["paragraphs"][0]["qas"][0]["id"] = "u0"
json.dump(dup, open("dup.json", "w"))
PY
QA=(--model bert --d-model 32 --heads 2 --layers 2 --d-ff 64 --batch 32 --warmup 20 --threads 1
    --bpe-vocab 300 --context 32 --doc-stride 8)

# Measured: exact match and F1 100% at seeds 1-3 after 300 steps (about 1
# s); chance is one name among 21 to 41 tokens.
expect_ok "$TRAIN" "${QA[@]}" --data train.json --valid dev.json --steps 300 --eval-every 150 \
  --out qa
expect_out "(squad, bpe tokens,"
expect_out "objective qa"
expect_out "300 training questions in"
f1=$(sed -n 's/^held-out exact match: [0-9.]*%, F1: \([0-9.]*\)%$/\1/p' "$QKV_TMP/out")
[ -n "$f1" ] || { cat "$QKV_TMP/out"; fail "no held-out exact match and F1 line"; }
awk -v a="$f1" 'BEGIN { exit !(a >= 95) }' || { cat "$QKV_TMP/out"; fail "qa reached only F1 $f1% (want >= 95%)"; }
[ -s qa/log.csv ] || fail "no log.csv"
mkdir elsewhere && cd elsewhere
expect_ok "$TRAIN" --load ../qa/model.safetensors --eval-only --valid ../dev.json
expect_out "F1: $f1%"
# --ask with --passage: a passage of 70 words read as several windows.
{ for i in $(seq 30); do printf 'the cat sat '; done; printf 'Grace '
  for i in $(seq 10); do printf 'by the door '; done; echo; } > passage.txt
expect_ok "$TRAIN" --load ../qa/model.safetensors --ask "Who is in the text?" --passage passage.txt
grep -qx "Grace" "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "--ask did not answer Grace"; }
expect_out "windows of 32 tokens"
# The gradient explorer on that question: the window holding the answer,
# scored with the span loss on it, every gradient against finite differences.
expect_ok "$TRAIN" --load ../qa/model.safetensors --explain "Who is in the text?" \
  --passage passage.txt --html qa.html
expect_out ", 0 fail,"
grep -q "span_logits" qa.html || fail "the explorer page has no span_logits op"
expect_fail "$TRAIN" --load ../qa/model.safetensors --explain "Who is in the text?" --html qa.html
expect_out "--explain: a question-answering model answers from a context"
expect_fail "$TRAIN" --load ../qa/model.safetensors --ask "Who is in the text?"
expect_out "--ask: a question-answering model answers from a context: give it with --passage FILE"
cd ..

# SQuAD v2: questions without an answer point at [CLS]; the threshold for
# "no answer" is chosen on the held-out split and reported beside it.
expect_ok "$TRAIN" "${QA[@]}" --data v2.json --steps 60 --eval-every 0
expect_out "SQuAD v2: questions without an answer point at [CLS]"
expect_out "with the threshold chosen on this split,"

# Bad input: one line, naming the file and the question, before training.
expect_fail "$TRAIN" "${QA[@]}" --data bad_start.json --steps 30
expect_out "question 'b2': answer_start"
expect_out "does not point at its text"
expect_fail "$TRAIN" "${QA[@]}" --data dup.json --steps 30
expect_out "question 'u0': the id is used twice"
expect_fail "$TRAIN" "${QA[@]}" --data train.json --doc-stride 40 --steps 30
expect_out "--doc-stride 40 is not below the"
expect_fail "$TRAIN" "${QA[@]}" --data train.json --context 7 --steps 30
expect_out "does not fit in --context 7"
expect_fail "$TRAIN" "${QA[@]}" --data train.json --objective classify --steps 30
expect_out "--objective"
expect_fail "$TRAIN" --task reverse --doc-stride 16 --steps 30
expect_out "--doc-stride: goes with question answering (--format squad)"
expect_fail "$TRAIN" --task reverse --max-answer-tokens 5 --steps 30
expect_out "--max-answer-tokens: goes with question answering"
expect_fail "$TRAIN" "${QA[@]}" --data train.json --label-smoothing 0.1 --steps 30
expect_out "--label-smoothing"
