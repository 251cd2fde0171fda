# Every output path of every program, given a device node, a FIFO, a dangling
# symlink or a symlink to a regular file (docs/reliability.md, "Output
# paths"; the rule is io/output_file.h's). The outputs:
#   train          --save PATH (also what --save-every N writes every N steps)
#                  --out DIR: DIR/log.csv, DIR/loss.svg, DIR/attention.svg
#                  --load CKPT --explain TEXT --html PAGE
#   step_through   --dot PATH, and PATH.svg that Graphviz's layout goes to
#                  --html PAGE
#   tools/qkv_checkpoint.py   write(PATH, ...)
# (bench_decode's and bench_train's --save-* write through write_safetensors
# and nn::save, refused or written through the same way:
# tests/test_output_file.cpp. train's rescue files are names of its own.)
# A device (made here by mknod with /dev/null's numbers: no test touches the
# real /dev; skipped with a message where mknod is refused), a FIFO and a
# dangling symlink are refused before any work in one line naming the flag,
# the path and its kind, and stay what they were, with no file left beside
# them; each run is under `timeout`, so a FIFO that blocks fails instead of
# hanging. A symlink to a regular file is written through: the file gets the
# content, the link stays a link. The explorer pages are made with $TMPDIR
# named `x';touch PWNED;'` and `it's`: Graphviz runs without a shell, so the
# pages hold their graphs and no PWNED appears.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
STEP="$QKV_BIN/step_through"
T=(timeout 60)

kinds="fifo dangling"
if mknod probe c 1 3 2>/dev/null; then
  rm probe
  kinds="dev $kinds"
else
  echo "skipped: mknod is refused here, so no device node case"
fi
make_node() {  # make_node KIND PATH
  case $1 in
    dev) mknod "$2" c 1 3 ;;
    fifo) mkfifo "$2" ;;
    dangling) ln -s missing-target "$2" ;;
  esac
}
node_intact() {  # node_intact KIND PATH
  case $1 in
    dev) [ -c "$2" ] ;;
    fifo) [ -p "$2" ] ;;
    dangling) [ -L "$2" ] && [ ! -e "$2" ] ;;
  esac
}
said() {  # what the refusal says of KIND
  case $1 in
    dev) echo "is a character device, not a regular file" ;;
    fifo) echo "is a FIFO, not a regular file" ;;
    dangling) echo "is a symlink to a missing file" ;;
  esac
}
# refused FLAG PATH CMD...: with each kind of node at PATH, CMD fails in one
# line "FLAG PATH: <kind>", the node is intact and nothing else appeared.
refused() {
  local flag=$1 path=$2 kind before
  shift 2
  for kind in $kinds; do
    make_node "$kind" "$path"
    before=$(ls -A "$(dirname "$path")")
    expect_fail "${T[@]}" "$@"
    expect_out "$flag $path: $(said "$kind")"
    [ "$(wc -l < "$QKV_TMP/out")" = 1 ] || fail "$kind at $flag $path: not one line: $(cat "$QKV_TMP/out")"
    node_intact "$kind" "$path" || fail "$kind at $flag $path was replaced: $(ls -l "$path")"
    [ "$(ls -A "$(dirname "$path")")" = "$before" ] || fail "$kind at $flag $path: a file appeared beside it"
    rm "$path"
  done
}

# ---- refused before any work --------------------------------------------------------
mkdir run
refused --save run/m.st "$TRAIN" "${TINY[@]}" --steps 1 --out run --save run/m.st
refused --save run/m.st "$TRAIN" "${TINY[@]}" --steps 1 --out run --save run/m.st --save-every 1
for f in log.csv loss.svg attention.svg; do
  refused --out "run/$f" "$TRAIN" "${TINY[@]}" --steps 1 --out run --no-save
done
refused --html page.html "$TRAIN" --load run/m.st --explain "a b" --html page.html
refused --dot g.dot "$STEP" --part 1 --no-fd --dot g.dot
refused --dot g.dot.svg "$STEP" --part 1 --no-fd --dot g.dot
refused --html page.html "$STEP" --html page.html
[ -z "$(ls -A run)" ] || fail "a refused run left files in run/: $(ls -A run)"

# ---- a symlink to a regular file is written through ---------------------------------
mkdir real
for f in m.st log.csv loss.svg attention.svg g.dot g.dot.svg s.html e.html py.st; do
  : > "real/$f"
done
ln -s ../real/m.st run/m.st  # relative to the link's own folder
for f in log.csv loss.svg attention.svg; do ln -s "$QKV_TMP/real/$f" "run/$f"; done
links=(run/m.st run/log.csv run/loss.svg run/attention.svg g.dot g.dot.svg s.html e.html py.st)
ln -s real/g.dot g.dot
ln -s real/g.dot.svg g.dot.svg
ln -s real/s.html s.html
ln -s real/e.html e.html
ln -s real/py.st py.st

expect_ok "${T[@]}" "$TRAIN" "${TINY[@]}" --steps 2 --save-every 1 --out run --save run/m.st
expect_out "checkpoint: run/m.st (step 2)"
expect_out "wrote run/log.csv, loss.svg, attention.svg"
head -c 200 real/m.st | grep -q '"model\.' || fail "real/m.st does not hold the checkpoint"
grep -q "^step,loss" real/log.csv || fail "real/log.csv does not hold the log"
grep -q "<svg" real/loss.svg && grep -q "<svg" real/attention.svg || fail "the plots are not in real/"

mkdir -p "tmp/it's" "tmp/x';touch PWNED;'"
TMPDIR="$QKV_TMP/tmp/it's" expect_ok "${T[@]}" "$TRAIN" --load run/m.st --explain "a b" --html e.html
TMPDIR="$QKV_TMP/tmp/x';touch PWNED;'" expect_ok "${T[@]}" "$STEP" --html s.html
for p in real/e.html real/s.html; do
  grep -q '<template id="graph-0"><svg' "$p" || fail "$p does not hold the laid-out graph"
done
expect_ok "${T[@]}" "$STEP" --part 1 --no-fd --dot g.dot
grep -q "^digraph" real/g.dot || fail "real/g.dot does not hold the graph"
if command -v dot >/dev/null; then
  expect_out "Rendered g.dot.svg with Graphviz"
  grep -q "<svg" real/g.dot.svg || fail "real/g.dot.svg is no SVG"
fi

kinds="$kinds" QKV_SRC="$QKV_SRC" python3 - <<'EOF' || fail "tools/qkv_checkpoint.py's writer (above)"
import os, stat, sys
sys.path.insert(0, os.path.join(os.environ["QKV_SRC"], "tools"))
import qkv_checkpoint as qc
qc.write("py.st", {"x": ([2], [1.0, 2.0])})
assert qc.read("real/py.st")[0]["x"][0] == [2], "real/py.st"
kinds = {"fifo": os.mkfifo, "dangling": lambda p: os.symlink("missing-target", p)}
if "dev" in os.environ["kinds"]:
    kinds["dev"] = lambda p: os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
said = {"dev": "is a character device", "fifo": "is a FIFO", "dangling": "is a symlink to a missing file"}
for kind, make in kinds.items():
    make("node")
    before = sorted(os.listdir("."))
    try:
        qc.write("node", {"x": ([1], [1.0])})
        sys.exit(f"{kind}: written")
    except ValueError as e:
        assert f"node: {said[kind]}" in str(e), str(e)
    assert sorted(os.listdir(".")) == before, f"{kind}: a file appeared"
    os.remove("node")
EOF

for l in "${links[@]}"; do [ -L "$l" ] || fail "$l is no longer a symlink"; done
strays=$(find . -name '*.tmp*' -o -name '*.svg.*' -o -name 'qkv-explorer-*')
[ -z "$strays" ] || fail "stray files: $strays"
[ -z "$(find . -name PWNED)" ] || fail "a shell ran a command built from \$TMPDIR"
