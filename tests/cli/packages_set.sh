# datasets/make_packages.py on a small apt lists folder written here (one
# plain Packages list, one gzipped, a Translation-en file, an InRelease): the
# chosen sections kept and the others dropped, the archive area stripped from
# a section and the version from a Source, a description found through its
# Description-md5, exact repeats kept once, every binary of a source in that
# source's split (the sha256 rule recomputed here), the same bytes on a second
# run, --small, and one-line refusals for a missing or empty folder.
source "$(dirname "$0")/lib.bash"
cd "$QKV_TMP"
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir lists
python3 - <<'PY'
import gzip
words = ["chess", "mail", "audio", "plot", "editor", "network", "database", "video"]
main, contrib = [], []
for i in range(60):
    sec = ["games", "mail", "sound", "science", "editors", "net", "database", "video"][i % 8]
    # Two binaries per source, near-identical descriptions: they must share a split.
    for b, target in (("", main), ("-data", contrib)):
        area = "contrib/" if target is contrib else ""
        src = f"Source: pkg{i} (1.{i}-1)\n" if b else ""
        target.append(f"Package: pkg{i}{b}\n{src}Version: 1\nSection: {area}{sec}\n"
                      f"Description: {words[i % 8]} tool number {i}{' (data)' if b else ''}\n"
                      f" A long description line that is not kept.\n .\n More.\n")
# The same (description, section) under two sources: kept once.
main.append("Package: twin-a\nSection: games\nDescription: the same words twice\n")
main.append("Package: twin-b\nSection: games\nDescription: the same words twice\n")
# Dropped sections.
main.append("Package: libfoo1\nSection: libs\nDescription: foo library, shared object\n")
main.append("Package: python3-foo\nSection: python\nDescription: Python 3 module for foo\n")
# The description only through Translation-en (Description-md5).
main.append("Package: mdonly\nSection: net\nDescription-md5: 0123456789abcdef0123456789abcdef\n")
main.append("Package: nodesc\nSection: net\nDescription-md5: ffffffffffffffffffffffffffffffff\n")
open("lists/example.org_debian_dists_x_main_binary-amd64_Packages", "w").write("\n".join(main))
with gzip.open("lists/example.org_debian_dists_x_contrib_binary-amd64_Packages.gz", "wt") as f:
    f.write("\n".join(contrib))
open("lists/example.org_debian_dists_x_main_i18n_Translation-en", "w").write(
    "Package: mdonly\nDescription-md5: 0123456789abcdef0123456789abcdef\n"
    "Description-en: a description read from the translation file\n long text\n")
open("lists/example.org_debian_dists_x_InRelease", "w").write(
    "-----BEGIN PGP SIGNED MESSAGE-----\n\nOrigin: Test\nDate: Sat, 01 Jan 2022 00:00:00 UTC\n")
PY
expect_ok python3 "$here/datasets/make_packages.py" --lists lists --out set
expect_out "2 lists, 126 stanzas"
python3 - <<'PY' || fail "the set's contents"
import hashlib, json
rows = {}
for split in ("train", "valid", "test"):
    for line in open(f"set/{split}.tsv", encoding="utf-8"):
        desc, sec = line.rstrip("\n").split("\t")
        assert (desc, sec) not in rows, ("repeated", desc)
        rows[(desc, sec)] = split
def split_of(source):
    b = int(hashlib.sha256(source.encode()).hexdigest(), 16) % 10
    return "train" if b < 8 else "valid" if b == 8 else "test"
words = ["chess", "mail", "audio", "plot", "editor", "network", "database", "video"]
secs = ["games", "mail", "sound", "science", "editors", "net", "database", "video"]
for i in range(60):
    a = (f"{words[i % 8]} tool number {i}", secs[i % 8])
    b = (f"{words[i % 8]} tool number {i} (data)", secs[i % 8])  # contrib/ stripped
    # Both binaries in their source's split (pkg{i}-data names pkg{i}, with a version).
    assert rows[a] == rows[b] == split_of(f"pkg{i}"), (i, rows[a], rows[b])
# Split by binary name, some pairs would part: the check above could fail.
assert any(split_of(f"pkg{i}") != split_of(f"pkg{i}-data") for i in range(60))
assert rows[("the same words twice", "games")] == split_of("twin-a")
assert ("a description read from the translation file", "net") in rows
assert not any(s in ("libs", "python") for _, s in rows), "a dropped section was kept"
assert len(rows) == 120 + 1 + 1, len(rows)
assert {"train", "valid", "test"} <= set(rows.values()), "a split is empty"
for split in ("train", "valid", "test"):
    lines = open(f"set/{split}.tsv", encoding="utf-8").read().splitlines()
    assert lines == sorted(lines), split
pre = open("set/pretrain.txt", encoding="utf-8").read().splitlines()
assert sorted(pre) == pre and len(set(pre)) == len(pre)
train_desc = {d for (d, s), sp in rows.items() if sp == "train"}
assert train_desc <= set(pre), "a training description is not in pretrain.txt"
held = {d for (d, s), sp in rows.items() if sp != "train"}
assert not held & set(pre), "pretrain.txt holds a held-out description"
info = json.load(open("set/info.json"))
files = {l["file"]: l for l in info["lists"]}
for name, l in files.items():
    assert l["sha256"] == hashlib.sha256(open("lists/" + name, "rb").read()).hexdigest(), name
    assert l["date"] == "Sat, 01 Jan 2022 00:00:00 UTC", l
assert info["skipped"]["no description"] == 1, info["skipped"]
assert sum(sum(c.values()) for c in info["counts"].values()) == len(rows)
PY
cp -r set first
expect_ok python3 "$here/datasets/make_packages.py" --lists lists --out set
for f in train.tsv valid.tsv test.tsv pretrain.txt info.json; do
  cmp -s first/$f set/$f || fail "a second run wrote other bytes in $f"
done
expect_ok python3 "$here/datasets/make_packages.py" --lists lists --out small --small 3
[ "$(cat small/train.tsv small/valid.tsv small/test.tsv | wc -l)" -le 9 ] || fail "--small 3 kept more"
[ "$(wc -l < small/train.tsv)" = 3 ] || fail "--small 3: $(wc -l < small/train.tsv) training lines"
expect_ok python3 "$here/datasets/make_packages.py" --lists lists --out small2 --small 3
cmp -s small/train.tsv small2/train.tsv || fail "--small is not deterministic"
expect_fail python3 "$here/datasets/make_packages.py" --lists missing --out x
expect_out "--lists missing: not a folder"
mkdir empty
expect_fail python3 "$here/datasets/make_packages.py" --lists empty --out x
expect_out "--lists empty: no binary Packages lists there"
grep -q Traceback "$QKV_TMP/out" && fail "a traceback instead of a message"
exit 0
