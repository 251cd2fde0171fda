#!/usr/bin/env python3
"""Writes the date-normalisation data set: datasets/dates/{train,valid}.tsv.

Each line is "<a date as people write it><TAB><the same date as YYYY-MM-DD>":
    3 March 2021	2021-03-03
    Wednesday, March 3, 2021	2021-03-03
Dates run from 1950 to 2049 in eight written forms. The two files share no
source line. Deterministic (seeded), so running it again gives the same bytes:

    python3 datasets/make_dates.py
"""
import datetime
import pathlib
import random

MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def written(d: datetime.date, form: int) -> str:
    month, short = MONTHS[d.month - 1], MONTHS[d.month - 1][:3]
    day = DAYS[d.weekday()]
    return [
        f"{d.day} {month} {d.year}",
        f"{month} {d.day}, {d.year}",
        f"{d.day} {short} {d.year}",
        f"{short} {d.day} {d.year}",
        f"{day}, {d.day} {month} {d.year}",
        f"{day[:3]} {month} {d.day}, {d.year}",
        f"{d.day} {month.lower()} {d.year}",
        f"the {d.day} of {month} {d.year}",
    ][form]


def main() -> None:
    rng = random.Random(2021)
    first, last = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)
    span = (last - first).days
    seen, lines = set(), []
    while len(lines) < 11000:
        d = first + datetime.timedelta(days=rng.randrange(span + 1))
        src = written(d, rng.randrange(8))
        if src in seen:
            continue
        seen.add(src)
        lines.append(f"{src}\t{d.isoformat()}\n")
    out = pathlib.Path(__file__).resolve().parent / "dates"
    out.mkdir(exist_ok=True)
    (out / "train.tsv").write_text("".join(lines[:10000]))
    (out / "valid.tsv").write_text("".join(lines[10000:]))


if __name__ == "__main__":
    main()
