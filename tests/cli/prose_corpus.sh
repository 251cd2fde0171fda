# datasets/make_prose.py on a small documentation folder written here (make
# test does not install python3.11-doc): paragraphs kept, code and markup
# dropped, every N-th document held out whole, a manifest naming every file
# read, the same bytes on a second run, and a clear refusal for a missing folder.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p html/library html/whatsnew
for i in 0 1 2 3; do
  cat > html/library/doc$i.html <<HTML
<html><body><div class="nav"><a href="x">Navigation</a></div>
<h1>Title $i</h1>
<p>Paragraph one of document $i, with <code>code</code> &amp; an entity.</p>
<pre>def not_prose_$i(): pass</pre>
<p>Paragraph
   two of document $i.</p>
</body></html>
HTML
done
echo '<p>gh-12345: a changelog line</p>' > html/whatsnew/changelog.html
expect_ok python3 "$here/datasets/make_prose.py" --html html --out corpus --valid-every 2 --min-bytes 0
expect_out "4 files"
[ "$(sed -n 1p corpus/valid.txt)" = "Paragraph one of document 0, with code & an entity." ] ||
  fail "valid.txt's first line: $(sed -n 1p corpus/valid.txt)"
grep -q "document 2" corpus/valid.txt || fail "document 2 (every 2nd) is not held out"
grep -q "document 1" corpus/train.txt || fail "document 1 is not in train.txt"
grep -q "document 2" corpus/train.txt && fail "a held-out document is also in train.txt"
grep -q "not_prose\|Navigation\|Title\|changelog" corpus/*.txt && fail "code, navigation, a heading or the changelog was kept"
grep -q "Paragraph two of document 3." corpus/train.txt || fail "whitespace inside a paragraph not collapsed"
python3 - <<PY || fail "manifest"
import hashlib, json
m = json.load(open("corpus/MANIFEST.json"))
assert m["package"] == "python3.11-doc" and m["valid_every"] == 2, m
assert sorted(m["files_read"]) == [f"library/doc{i}.html" for i in range(4)], m["files_read"]
for name in ("train.txt", "valid.txt"):
    assert m["sha256"][name] == hashlib.sha256(open("corpus/" + name, "rb").read()).hexdigest(), name
PY
cp corpus/train.txt first.txt
expect_ok python3 "$here/datasets/make_prose.py" --html html --out corpus --valid-every 2 --min-bytes 0
cmp -s first.txt corpus/train.txt || fail "a second run wrote other bytes"
expect_fail python3 "$here/datasets/make_prose.py" --html missing --out out2
expect_out "missing is not a folder: install python3.11-doc"
expect_fail python3 "$here/datasets/make_prose.py" --html html --out out3
expect_out "bytes of paragraphs under html (--min-bytes 5000000)"
touch afile
expect_fail python3 "$here/datasets/make_prose.py" --html html --out afile --min-bytes 0
expect_out "--out afile: cannot write there"
grep -q Traceback "$QKV_TMP/out" && fail "a traceback instead of a message"
exit 0
