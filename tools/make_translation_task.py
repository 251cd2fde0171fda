#!/usr/bin/env python3
"""A synthetic translation task whose rows differ: reordering, agreement and a
long-range dependency, word tokens, written as `source<TAB>target` lines that
`build/rel-f32/train --data train.tsv --valid valid.tsv --tokens word` reads.

Source (English-like, SVO):
    the big red cat that sees a dog chases some mice with the old fox
Target (an invented language, SOV, noun before its adjectives, article last):
    gato grana rusa la ke hundo un ak vidaf musoj pl ak casaf foko malja la kun

What the model has to learn:
- reordering: subject, object, verb (the verb moves to the end, past the
  object); a relative clause's verb moves to the end of its clause; the
  noun comes first, then its adjectives in reverse order, then its article;
  "with X" becomes the postposition "X kun".
- agreement: every target noun has a gender the source does not show
  (lexical, as in French or Spanish): its article and adjectives agree with it
  in gender and number (four forms each).
- a long-range dependency: the main verb agrees with the subject's gender and
  number, and comes after the subject's adjectives, its relative clause and
  the whole object phrase; a relative clause's verb agrees with its head noun.
- an object marker "ak" after every object noun phrase.

Files (fixed seed, so the same files on every machine):
    train.tsv  6000 pairs, source length at most 14 words
    valid.tsv   500 pairs of the same distribution, none in train.tsv
    long.tsv    500 pairs with sources of 16 words or more (more adjectives,
                relative clauses on both nouns): longer than any trained on

Usage: python3 tools/make_translation_task.py [OUT_DIR] (default
datasets/translation); standard library only.
"""
import os
import random
import sys

SEED = 25

# source lemma: (singular, plural, target singular, target plural, gender)
NOUNS = [
    ("cat", "cats", "gato", "gatoj", "f"),
    ("dog", "dogs", "hundo", "hundoj", "m"),
    ("mouse", "mice", "muso", "musoj", "f"),
    ("fox", "foxes", "foko", "fokoj", "m"),
    ("bird", "birds", "birdo", "birdoj", "m"),
    ("horse", "horses", "cevo", "cevoj", "f"),
    ("child", "children", "ido", "idoj", "m"),
    ("teacher", "teachers", "docto", "doctoj", "f"),
    ("farmer", "farmers", "kulto", "kultoj", "m"),
    ("king", "kings", "rego", "regoj", "m"),
    ("queen", "queens", "regino", "reginoj", "f"),
    ("wolf", "wolves", "lupo", "lupoj", "f"),
]
# source adjective: target stem (+ o, a, oj, aj for m sg, f sg, m pl, f pl)
ADJECTIVES = [("big", "gran"), ("small", "malgran"), ("red", "rus"), ("old", "malj"),
              ("young", "jun"), ("happy", "fel"), ("black", "nigr"), ("quick", "rap")]
# source verb (3rd singular, plural): target stem (+ am, af, om, of: subject m sg, f sg, m pl, f pl)
VERBS = [("sees", "see", "vid"), ("chases", "chase", "cas"), ("likes", "like", "sat"),
         ("finds", "find", "trov"), ("helps", "help", "help"), ("bites", "bite", "mord"),
         ("follows", "follow", "sekv"), ("knows", "know", "kon")]


def article(definite, gender, plural):
    if definite:
        return {("m", False): "lo", ("f", False): "la", ("m", True): "los", ("f", True): "las"}[
            (gender, plural)]
    return {("m", False): "un", ("f", False): "una", ("m", True): "pl", ("f", True): "plaj"}[
        (gender, plural)]


def adjective(stem, gender, plural):
    return stem + {("m", False): "o", ("f", False): "a", ("m", True): "oj",
                   ("f", True): "aj"}[(gender, plural)]


def verb(stem, gender, plural):
    return stem + {("m", False): "am", ("f", False): "af", ("m", True): "om",
                   ("f", True): "of"}[(gender, plural)]


def noun_phrase(rng, max_adj):
    """(source words, target words, gender, plural) of one noun phrase."""
    noun = rng.choice(NOUNS)
    plural = rng.random() < 0.4
    definite = rng.random() < 0.6
    adjs = rng.sample(ADJECTIVES, rng.randint(0, max_adj))
    det = "the" if definite else ("some" if plural else "a")
    src = [det] + [a[0] for a in adjs] + [noun[1] if plural else noun[0]]
    tgt = ([noun[3] if plural else noun[2]] + [adjective(a[1], noun[4], plural)
                                               for a in reversed(adjs)]
           + [article(definite, noun[4], plural)])
    return src, tgt, noun[4], plural


def relative_clause(rng, head_gender, head_plural, max_adj):
    """'that V NP' -> 'ke NP ak V' (the verb agrees with the head noun)."""
    v = rng.choice(VERBS)
    osrc, otgt, _, _ = noun_phrase(rng, max_adj)
    src = ["that", v[1] if head_plural else v[0]] + osrc
    tgt = ["ke"] + otgt + ["ak", verb(v[2], head_gender, head_plural)]
    return src, tgt


def sentence(rng, long):
    max_adj = 4 if long else 2
    ssrc, stgt, sg, sp = noun_phrase(rng, max_adj)
    if rng.random() < (0.9 if long else 0.35):
        rs, rt = relative_clause(rng, sg, sp, max_adj)
        ssrc, stgt = ssrc + rs, stgt + rt
    v = rng.choice(VERBS)
    osrc, otgt, og, op = noun_phrase(rng, max_adj)
    if long and rng.random() < 0.7:
        rs, rt = relative_clause(rng, og, op, max_adj)
        osrc, otgt = osrc + rs, otgt + rt
    src = ssrc + [v[1] if sp else v[0]] + osrc
    tgt = stgt + otgt + ["ak", verb(v[2], sg, sp)]
    if rng.random() < 0.3:
        psrc, ptgt, _, _ = noun_phrase(rng, max_adj)
        src, tgt = src + ["with"] + psrc, tgt + ptgt + ["kun"]
    return " ".join(src), " ".join(tgt)


def draw(rng, n, keep, seen):
    out = []
    while len(out) < n:
        s, t = sentence(rng, long=keep == "long")
        words = len(s.split())
        if (keep == "short" and words > 14) or (keep == "long" and words < 16) or s in seen:
            continue
        seen.add(s)
        out.append((s, t))
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("datasets", "translation")
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(SEED)
    seen = set()
    sets = {"train.tsv": draw(rng, 6000, "short", seen), "valid.tsv": draw(rng, 500, "short", seen),
            "long.tsv": draw(rng, 500, "long", seen)}
    for name, pairs in sets.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8", newline="\n") as f:
            for s, t in pairs:
                f.write(s + "\t" + t + "\n")
        print(f"{os.path.join(out_dir, name)}: {len(pairs)} pairs")


if __name__ == "__main__":
    main()
