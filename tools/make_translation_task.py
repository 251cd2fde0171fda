#!/usr/bin/env python3
"""A synthetic translation task whose rows differ: reordering, agreement and a
long-range dependency, word tokens, written as `source<TAB>target` lines that
`build/rel-f32/train --data train.tsv --valid valid.tsv --tokens word` reads.

Source (English-like, SVO) and target (an invented language, SOV, the noun
before its adjectives, the article last), a line of train.tsv:
    the red bears that greet the bird hate the loud wolves
    ferisoj tutikoj los ke figupo la ak tasavabom ledimoj nigataj las ak nepezom

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
- a lexicon: 48 nouns (with a few irregular English plurals), 20 adjectives and
  20 verbs, each with an invented target stem, many of them rare in 4000 pairs.

Files (fixed seed, so the same files on every machine):
    train.tsv  4000 pairs, source length at most 14 words (small: a model
               over-fits it, which the dropout and label-smoothing rows need)
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

# Source words (English), each with an invented target stem and, for nouns, a
# gender: drawn from the fixed seed, so the lexicon is the same on every
# machine. 48 nouns, 20 adjectives and 20 verbs: enough rare words and
# genders to learn that a small model is still learning after 1000 steps.
NOUN_WORDS = [
    ("cat", "cats"), ("dog", "dogs"), ("mouse", "mice"), ("fox", "foxes"), ("bird", "birds"),
    ("horse", "horses"), ("child", "children"), ("teacher", "teachers"), ("farmer", "farmers"),
    ("king", "kings"), ("queen", "queens"), ("wolf", "wolves"), ("baker", "bakers"),
    ("doctor", "doctors"), ("sailor", "sailors"), ("soldier", "soldiers"),
    ("painter", "painters"), ("singer", "singers"), ("writer", "writers"),
    ("student", "students"), ("lion", "lions"), ("tiger", "tigers"), ("bear", "bears"),
    ("rabbit", "rabbits"), ("goat", "goats"), ("sheep", "sheep"), ("cow", "cows"),
    ("pig", "pigs"), ("duck", "ducks"), ("goose", "geese"), ("frog", "frogs"),
    ("snake", "snakes"), ("monkey", "monkeys"), ("owl", "owls"), ("eagle", "eagles"),
    ("fish", "fish"), ("whale", "whales"), ("shark", "sharks"), ("man", "men"),
    ("woman", "women"), ("boy", "boys"), ("girl", "girls"), ("friend", "friends"),
    ("neighbour", "neighbours"), ("judge", "judges"), ("thief", "thieves"), ("cook", "cooks"),
    ("guard", "guards")]
ADJECTIVE_WORDS = ["big", "small", "red", "old", "young", "happy", "black", "quick", "sad", "tall",
                   "short", "brave", "clever", "lazy", "angry", "proud", "quiet", "loud", "rich",
                   "poor"]
VERB_WORDS = [("sees", "see"), ("chases", "chase"), ("likes", "like"), ("finds", "find"),
              ("helps", "help"), ("bites", "bite"), ("follows", "follow"), ("knows", "know"),
              ("hears", "hear"), ("calls", "call"), ("meets", "meet"), ("feeds", "feed"),
              ("watches", "watch"), ("pushes", "push"), ("pulls", "pull"), ("visits", "visit"),
              ("loves", "love"), ("hates", "hate"), ("greets", "greet"), ("teaches", "teach")]


def invented_stems(rng, n):
    """n distinct invented stems of two or three consonant-vowel syllables."""
    cons, vows, out = "bdfgklmnprstvz", "aeiu", []
    while len(out) < n:
        stem = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.choice((2, 3))))
        stem += rng.choice(cons)
        if stem not in out:
            out.append(stem)
    return out


_lex = random.Random(2017)  # the lexicon; SEED draws the sentences
# source lemma: (singular, plural, target singular, target plural, gender)
NOUNS = [(sg, pl, stem + "o", stem + "oj", _lex.choice("mf"))
         for (sg, pl), stem in zip(NOUN_WORDS, invented_stems(_lex, len(NOUN_WORDS)))]
# source adjective: target stem (+ o, a, oj, aj for m sg, f sg, m pl, f pl)
ADJECTIVES = list(zip(ADJECTIVE_WORDS, invented_stems(_lex, len(ADJECTIVE_WORDS))))
# source verb (3rd singular, plural): target stem (+ am, af, om, of: subject m sg, f sg, m pl, f pl)
VERBS = [(sg, pl, stem) for (sg, pl), stem in zip(VERB_WORDS, invented_stems(_lex, len(VERB_WORDS)))]


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
    sets = {"train.tsv": draw(rng, 4000, "short", seen), "valid.tsv": draw(rng, 500, "short", seen),
            "long.tsv": draw(rng, 500, "long", seen)}
    for name, pairs in sets.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8", newline="\n") as f:
            for s, t in pairs:
                f.write(s + "\t" + t + "\n")
        print(f"{os.path.join(out_dir, name)}: {len(pairs)} pairs")


if __name__ == "__main__":
    main()
