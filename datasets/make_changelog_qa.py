#!/usr/bin/env python3
"""Question answering on Debian's changelogs, in SQuAD v1.1's format.

No QA set is packaged for Debian, so this one is built from what every
Debian machine has: /usr/share/doc/*/changelog.Debian.gz. Each entry has a
header "source (version) distribution; urgency=U", change lines, and a
trailer " -- Name <email>  date". A context is a window of three consecutive
entries of one source package (so the model must find the right entry);
questions come from templates over the entries' fields, and each answer is a
span of the context, its answer_start a character offset (as SQuAD's).

Two template sets:
  easy   "Who uploaded version V?" (the name), "When was version V uploaded?"
         (the date), "Which distribution was version V uploaded to?",
         "What was the urgency of version V?"
  hard   answers inside or read through the free-text changes: "Which
         version closed bug #N?" (the bug is in a change line, the answer in
         the entry's header) and "Which bug did version V close?" (a number
         in the changes)

Rules (deterministic given the installed packages, recorded in
MANIFEST.json with each changelog's package version and checksum): a
changelog is read once per real file (binary packages of one source share
it through symlinks); entries that do not parse are skipped and counted;
each entry's change lines are kept up to 8 lines (a longer entry is cut
there, the cut counted), e-mail addresses are dropped from the trailer
(the name is the answer); at most 6 windows per source package (its newest
entries), so that a few packages with long histories do not dominate. The
split is by source package (a hash of its name): 80% train, 10% valid, 10%
test.

  python3 datasets/make_changelog_qa.py --out DIR [--set easy|hard]
      DIR/train.json, valid.json, test.json (SQuAD v1.1), MANIFEST.json,
      pretrain.txt (the training contexts as text, for masked LM), and
      passage.txt with question.txt (the first test context, for --ask)
  python3 datasets/make_changelog_qa.py --baseline DIR/valid.json

--baseline answers a file with rules written from the templates (find the
entry whose header names the version, read the field; for a bug, the entry
whose changes name it) and prints SQuAD's exact match and F1 over it, the
same normalisation as the trainer's (data/squad.h).
"""
import argparse
import collections
import glob
import gzip
import hashlib
import json
import os
import re
import string
import subprocess
import sys

HEADER = re.compile(r"^(\S+) \(([^()\s]+)\) ([^;]+); urgency=(\w+)")
TRAILER = re.compile(r"^ -- (.+?) <[^>]*>  (.+)$")
BUG = re.compile(r"#(\d{4,7})")
MAX_CHANGE_LINES = 8
ENTRIES_PER_WINDOW = 3
MAX_WINDOWS = 6


def read_entries(path, counts):
    try:
        with gzip.open(path, "rt", encoding="utf-8", errors="strict") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError, EOFError):
        counts["unreadable changelogs"] += 1
        return []
    entries, cur = [], None
    for line in lines:
        m = HEADER.match(line)
        if m:
            cur = {"source": m.group(1), "version": m.group(2), "dist": m.group(3).strip(),
                   "urgency": m.group(4), "changes": [], "cut": False}
            continue
        if cur is None:
            continue
        t = TRAILER.match(line)
        if t:
            cur["name"], cur["date"] = t.group(1).strip(), t.group(2).strip()
            if cur["changes"] and cur["name"]:
                entries.append(cur)
            else:
                counts["entries without changes or a name"] += 1
            cur = None
            continue
        if line.strip():
            if len(cur["changes"]) < MAX_CHANGE_LINES:
                cur["changes"].append(line.rstrip())
            else:
                cur["cut"] = True
    return entries


def entry_text(e):
    """The entry as the context shows it: the header, the changes, the trailer without e-mail."""
    head = f"{e['source']} ({e['version']}) {e['dist']}; urgency={e['urgency']}"
    return head + "\n\n" + "\n".join(e["changes"]) + "\n\n -- " + e["name"] + "  " + e["date"]


def window_questions(entries, kind, qid_prefix):
    """One context of consecutive entries, and its questions with answer_starts (characters)."""
    parts, starts = [], []
    at = 0
    for e in entries:
        t = entry_text(e)
        starts.append(at)
        parts.append(t)
        at += len(t) + 2  # "\n\n" between entries
    context = "\n\n".join(parts)
    qas = []

    def add(question, answer, start):
        assert context[start:start + len(answer)] == answer, (answer, context[start:start + 40])
        qas.append({"id": f"{qid_prefix}-{len(qas)}", "question": question,
                    "answers": [{"text": answer, "answer_start": start}]})

    versions = collections.Counter(e["version"] for e in entries)
    for e, s in zip(entries, starts):
        if versions[e["version"]] > 1:
            continue  # a version twice in one context has no single answer
        head_v = s + len(e["source"]) + 2  # "source (" then the version
        t = entry_text(e)
        if kind == "easy":
            trailer = t.rindex("\n -- ")
            name_at = s + trailer + len("\n -- ")
            add(f"Who uploaded version {e['version']}?", e["name"], name_at)
            add(f"When was version {e['version']} uploaded?", e["date"],
                name_at + len(e["name"]) + 2)
            add(f"Which distribution was version {e['version']} uploaded to?", e["dist"],
                head_v + len(e["version"]) + 2)
            u = t.index("; urgency=") + len("; urgency=")
            add(f"What was the urgency of version {e['version']}?", e["urgency"], s + u)
        else:
            changes = "\n".join(e["changes"])
            bugs = BUG.findall(changes)
            if len(set(bugs)) == 1 and context.count("#" + bugs[0]) == 1:
                b = bugs[0]
                add(f"Which version closed bug #{b}?", e["version"], head_v)
                add(f"Which bug did version {e['version']} close?", b,
                    context.index("#" + b) + 1)
    return context, qas


def build(out, kind):
    counts = collections.Counter()
    seen_real, per_source = set(), collections.OrderedDict()
    files = []
    for path in sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz")):
        real = os.path.realpath(path)
        if real in seen_real:
            counts["symlinked copies skipped"] += 1
            continue
        seen_real.add(real)
        entries = read_entries(real, counts)
        if len(entries) < ENTRIES_PER_WINDOW:
            counts["changelogs with fewer than 3 entries"] += 1
            continue
        src = entries[0]["source"]
        if src in per_source:
            counts["second changelogs of a source"] += 1
            continue
        per_source[src] = entries
        counts["cut entries"] += sum(e["cut"] for e in entries)
        with open(real, "rb") as f:
            files.append({"file": path, "source": src, "newest": entries[0]["version"],
                          "sha256": hashlib.sha256(f.read()).hexdigest()})
    splits = {"train": [], "valid": [], "test": []}
    for src, entries in per_source.items():
        h = int(hashlib.sha256(src.encode()).hexdigest()[:8], 16) % 10
        split = "train" if h < 8 else "valid" if h == 8 else "test"
        for w in range(min(MAX_WINDOWS, len(entries) // ENTRIES_PER_WINDOW)):
            chunk = entries[w * ENTRIES_PER_WINDOW:(w + 1) * ENTRIES_PER_WINDOW]
            context, qas = window_questions(chunk, kind, f"{src}-{w}")
            if qas:
                splits[split].append({"title": src, "paragraphs": [{"context": context, "qas": qas}]})
    os.makedirs(out, exist_ok=True)
    sizes = {}
    for name, data in splits.items():
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"version": "1.1", "data": data}, f, ensure_ascii=False, sort_keys=True)
        sizes[name] = {"contexts": len(data),
                       "questions": sum(len(d["paragraphs"][0]["qas"]) for d in data)}
    # The training split's contexts as plain text, for pre-training by masked
    # language modelling on the same split (no held-out text in it).
    with open(os.path.join(out, "pretrain.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(d["paragraphs"][0]["context"] for d in splits["train"]) + "\n")
    # A passage and a question for `train --ask ... --passage`: the first test context's.
    if splits["test"]:
        first = splits["test"][0]["paragraphs"][0]
        with open(os.path.join(out, "passage.txt"), "w", encoding="utf-8") as f:
            f.write(first["context"] + "\n")
        with open(os.path.join(out, "question.txt"), "w", encoding="utf-8") as f:
            f.write(first["qas"][0]["question"] + "\n")
    dpkg = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
                          capture_output=True, text=True).stdout.splitlines()
    manifest = {"set": kind, "sizes": sizes, "counts": dict(sorted(counts.items())),
                "changelogs": files, "installed_packages": len(dpkg),
                "packages_sha256": hashlib.sha256("\n".join(sorted(dpkg)).encode()).hexdigest()}
    with open(os.path.join(out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    print(f"{out}: {sizes} ({len(per_source)} source packages; {dict(counts)})")


# ---- the rule-based baseline and SQuAD's metrics ---------------------------------------

def normalize(s):
    s = "".join(c for c in s.lower() if c not in set(string.punctuation))
    return " ".join(w for w in s.split() if w not in ("a", "an", "the"))


def f1(pred, gold):
    p, g = normalize(pred).split(), normalize(gold).split()
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if not p or not g:
        return float(p == g)
    if common == 0:
        return 0.0
    pr, rc = common / len(p), common / len(g)
    return 2 * pr * rc / (pr + rc)


def rule_answer(question, context):
    entries = context.split("\n\n -- ")
    blocks = []  # (header line, changes, trailer) per entry
    text = context
    for m in re.finditer(r"^(\S+) \(([^()\s]+)\) ([^;]+); urgency=(\w+)$", text, re.M):
        blocks.append(m)
    def entry_of_version(v):
        for i, m in enumerate(blocks):
            if m.group(2) == v:
                end = blocks[i + 1].start() if i + 1 < len(blocks) else len(text)
                return m, text[m.start():end]
        return None, ""
    q = re.match(r"Who uploaded version (\S+)\?", question)
    if q:
        m, body = entry_of_version(q.group(1))
        t = re.search(r"^ -- (.+?)  ", body, re.M)
        return t.group(1) if t else ""
    q = re.match(r"When was version (\S+) uploaded\?", question)
    if q:
        m, body = entry_of_version(q.group(1))
        t = re.search(r"^ -- .+?  (.+)$", body, re.M)
        return t.group(1) if t else ""
    q = re.match(r"Which distribution was version (\S+) uploaded to\?", question)
    if q:
        m, _ = entry_of_version(q.group(1))
        return m.group(3) if m else ""
    q = re.match(r"What was the urgency of version (\S+)\?", question)
    if q:
        m, _ = entry_of_version(q.group(1))
        return m.group(4) if m else ""
    q = re.match(r"Which version closed bug #(\d+)\?", question)
    if q:
        at = text.find("#" + q.group(1))
        best = None
        for m in blocks:
            if m.start() < at:
                best = m
        return best.group(2) if best else ""
    q = re.match(r"Which bug did version (\S+) close\?", question)
    if q:
        _, body = entry_of_version(q.group(1))
        b = BUG.search(body)
        return b.group(1) if b else ""
    return ""


def baseline(path):
    data = json.load(open(path, encoding="utf-8"))["data"]
    em = f = n = 0
    for d in data:
        for p in d["paragraphs"]:
            for qa in p["qas"]:
                pred = rule_answer(qa["question"], p["context"])
                golds = [a["text"] for a in qa["answers"]]
                em += max(float(normalize(pred) == normalize(g)) for g in golds)
                f += max(f1(pred, g) for g in golds)
                n += 1
    print(f"rule-based baseline on {path}: exact match {100 * em / n:.2f}%, F1 {100 * f / n:.2f}% "
          f"({n} questions)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for train.json, valid.json, test.json, MANIFEST.json")
    ap.add_argument("--set", choices=["easy", "hard"], default="easy")
    ap.add_argument("--baseline", metavar="FILE", help="score the rule-based baseline on FILE")
    a = ap.parse_args()
    if a.baseline:
        baseline(a.baseline)
    elif a.out:
        build(a.out, a.set)
    else:
        ap.error("give --out DIR or --baseline FILE")


if __name__ == "__main__":
    sys.exit(main())
