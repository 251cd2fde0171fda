#!/usr/bin/env bash
# train --model vit: the Vision Transformer on a folder of IDX files (MNIST's
# format), written here: 8x8 images of three classes (a bright left, right
# or lower half over noise). It learns them to a stated accuracy, scores the
# test files once, evaluates and answers (a PNG) from its checkpoint in
# another folder, and refuses in one line, before training: an IDX file whose
# header lies or that is cut short, a test label no training image has, a
# PNG of another size, a patch that does not tile the image, images for a
# model that reads tokens.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
mkdir imgs
python3 - <<'PY'
import gzip, random, struct, zlib
rng = random.Random(5)
def image(c):
    px = [rng.randrange(0, 90) for _ in range(64)]
    for y in range(8):
        for x in range(8):
            if (c == 0 and x < 4) or (c == 1 and x >= 4) or (c == 2 and y >= 4):
                px[y * 8 + x] = rng.randrange(150, 256)
    return px
def write(prefix, n, labels_from=(0, 1, 2)):
    ims, labs = [], []
    for i in range(n):
        c = labels_from[i % len(labels_from)]
        ims += image(c); labs.append(c)
    with gzip.open(f"imgs/{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + bytes(ims))
    with gzip.open(f"imgs/{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labs))
write("train", 600)
write("t10k", 90)
def png(path, w, h, px):
    raw = b"".join(b"\0" + bytes(px[y * w:(y + 1) * w]) for y in range(h))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
png("right.png", 8, 8, image(1))
png("big.png", 9, 8, [0] * 72)
PY
VIT=(--model vit --data imgs --patch 4 --d-model 16 --heads 2 --layers 2 --d-ff 32 --batch 32
     --warmup 10 --threads 1 --valid-fraction 0.1)

expect_ok "$TRAIN" "${VIT[@]}" --steps 150 --eval-every 50 --out vit
expect_out "qkv train: images imgs (8x8, 3 labels), held-out 60, test 90"
expect_out "model: vit, d_model 16, 2 heads, 2 layers,"
acc=$(sed -n 's/^held-out accuracy: \([0-9.]*\)%$/\1/p' "$QKV_TMP/out")
[ -n "$acc" ] || { cat "$QKV_TMP/out"; fail "no held-out accuracy line"; }
awk -v a="$acc" 'BEGIN { exit !(a >= 90) }' || { cat "$QKV_TMP/out"; fail "vit reached only $acc% (want >= 90%)"; }
test_acc=$(sed -n 's/^test (90 inputs, scored once, now): accuracy \([0-9.]*\)%.*/\1/p' "$QKV_TMP/out")
[ -n "$test_acc" ] || { cat "$QKV_TMP/out"; fail "no test-set line"; }
awk -v a="$test_acc" 'BEGIN { exit !(a >= 90) }' || fail "test accuracy only $test_acc%"
expect_out "confusion (rows: true label, columns: answer)"
[ -s vit/confusion.svg ] || fail "no confusion.svg"
[ -s vit/class_attention.svg ] || fail "no class_attention.svg"
grep -q "layer 2" vit/class_attention.svg || fail "class_attention.svg lacks layer 2"
grep -q "<svg" vit/confusion.svg || fail "confusion.svg is not an SVG"

# From another folder, with nothing but the file (and the images to score).
mkdir elsewhere && cd elsewhere
expect_ok "$TRAIN" --load ../vit/model.safetensors --eval-only
expect_out "held-out accuracy: $acc%"
expect_ok "$TRAIN" --load ../vit/model.safetensors --ask ../right.png
grep -qE '^1 \(probability [0-9.]+\)' "$QKV_TMP/out" || { cat "$QKV_TMP/out"; fail "--ask did not answer label 1 for a bright right half"; }
expect_fail "$TRAIN" --load ../vit/model.safetensors --ask ../big.png
expect_out "the image is 8x9 but the model reads 8x8"
# The gradient explorer on one image: the patch projection and the class
# token among its ops, every gradient checked by finite differences.
expect_ok "$TRAIN" --load ../vit/model.safetensors --explain ../right.png --html page.html
expect_out ", 0 fail,"
grep -q "patch_embed" page.html || fail "the explorer page shows no patch_embed op"
cd ..

# Bad data, refused before training, naming the file and what was expected.
mkdir lie && cp imgs/train-labels-idx1-ubyte.gz lie/
python3 -c "
import gzip, struct
gzip.open('lie/train-images-idx3-ubyte.gz', 'wb').write(struct.pack('>IIII', 0x803, 600, 8, 8) + bytes(64 * 10))"
expect_fail "$TRAIN" "${VIT[@]}" --data lie --steps 20 --out lie_run
expect_out "lie/train-images-idx3-ubyte.gz"
[ ! -e lie_run ] || fail "a refused run left lie_run/ behind"
mkdir unseen && cp imgs/train-* unseen/ && cp imgs/t10k-images-idx3-ubyte.gz unseen/
python3 -c "
import gzip, struct
gzip.open('unseen/t10k-labels-idx1-ubyte.gz', 'wb').write(struct.pack('>II', 0x801, 90) + bytes([7] * 90))"
expect_fail "$TRAIN" "${VIT[@]}" --data unseen --steps 20 --out unseen_run
expect_out "test image 0 has label 7, which no training image has"
expect_fail "$TRAIN" "${VIT[@]}" --patch 3 --steps 20 --out p3
expect_out "--patch 3: the images are 8x8, which 3x3 patches do not tile"
expect_fail "$TRAIN" --model gpt --data imgs --format idx --steps 20
expect_out "--format: idx (images) is read by a model that reads images (--model vit)"
expect_fail "$TRAIN" --model vit --steps 20
expect_out "--data: the vit model reads images"
expect_fail "$TRAIN" "${VIT[@]}" --label-names "a,b," --steps 20
expect_out "--label-names: has an empty name"
expect_fail "$TRAIN" "${VIT[@]}" --label-names "a,b,a" --steps 20
expect_out "--label-names: names a label twice"
expect_fail "$TRAIN" "${VIT[@]}" --patch -1 --steps 20
expect_out "--patch: the vit model cuts its images into P x P patches: must be >= 1, got -1"
echo "train_vit: ok (held-out $acc%, test $test_acc%)"
