# examples/bow_classify on a tiny set written here, where each label has its
# own words and the rest is shared noise: the classifier must beat both
# chance and the majority class on the held-out file (an assertion that fails
# for a model that learns nothing), --train-limit and --seed give the same
# numbers twice, and bad files are refused in one line naming file and line.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
python3 - <<'PY'
import random
r = random.Random(5)
keys = {"games": ["chess", "puzzle", "arcade"], "sound": ["audio", "mixer", "synth"],
        "net": ["http", "proxy", "dns"], "mail": ["imap", "smtp", "inbox"]}
noise = ["tool", "for", "the", "simple", "program", "with", "support", "and", "a", "of"]
def lines(n):
    out = []
    for i in range(n):
        label = list(keys)[i % 4] if i % 3 else "net"  # net is the majority class
        words = r.sample(noise, 4) + [r.choice(keys[label])]
        r.shuffle(words)
        out.append(" ".join(words).capitalize() + "\t" + label)
    return "".join(l + "\n" for l in out)
open("train.tsv", "w").write(lines(120))
open("test.tsv", "w").write(lines(60))
PY
BOW="$QKV_BIN/bow_classify"
expect_ok "$BOW" --train train.tsv --test test.tsv --epochs 30
expect_out "120 training examples (of 120, seed 1), 4 labels"
python3 - "$QKV_TMP/out" <<'PY' || fail "accuracy"
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"test accuracy ([0-9.]+) .*majority class 'net' ([0-9.]+)", text)
acc, majority = float(m.group(1)), float(m.group(2))
assert majority > 0.25, majority  # net is the most frequent label here
# Each test line holds its label's word: a linear model on word counts separates them.
assert acc >= 0.9 and acc > majority + 0.3, (acc, majority)
PY
expect_ok "$BOW" --train train.tsv --test test.tsv --train-limit 40 --seed 3
cp out first
expect_ok "$BOW" --train train.tsv --test test.tsv --train-limit 40 --seed 3
cmp -s first out || fail "the same seed gave other numbers"
expect_out "40 training examples (of 120, seed 3)"
printf 'no tab here\n' > bad.tsv
expect_fail "$BOW" --train bad.tsv --test test.tsv
expect_out "--train bad.tsv:1: expected 'text<TAB>label', found no tab"
printf 'a text\tvideo\n' > unseen.tsv
expect_fail "$BOW" --train train.tsv --test unseen.tsv
expect_out "--test unseen.tsv: label 'video' of example 1 is not in --train's 4 labels"
expect_fail "$BOW" --train missing.tsv --test test.tsv
expect_out "--train missing.tsv: no such file"
exit 0
