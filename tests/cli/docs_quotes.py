#!/usr/bin/env python3
"""Numbers the docs quote from a program's output are the numbers it prints.

A page marks a quote with an HTML comment on its own line, naming the
program (a file of QKV_BIN) and its arguments:

    <!-- quoted from: step_through --part 2 -->

and the block that follows it (after blank lines, up to the next blank
line: a paragraph or an indented output block) is the quote. Every number in it (1704, 0.7703,
-0.0651, 1e-6, 9.0e-08; not the digits of a name such as norm3 or
layers.0) must be one the program prints, at the precision the page quotes
it: 0.7703 matches a printed 0.77031 or 0.7703, 9.0e-08 a printed 8.96e-08,
1704 a printed 1704. So a marked block holds quotes only; a number that
depends on the machine's instruction set (a float32 rounding gap, which
differs between AVX2 and AVX-512) is not quoted in one: the page gives its
size in words ("about 1e-7") outside a marked block.

Usage: docs_quotes.py QKV_BIN PAGE.md...   (exit 1 naming each stale number)
"""
import re
import shlex
import subprocess
import sys

MARK = re.compile(r'^<!-- quoted from: (.+?) -->\s*$')
NUMBER = re.compile(r'(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w]|\.\d)')


def quoted_form(text):
    """How a quoted number is compared: a function giving any float as the
    page would write it at the page's precision, and the quote itself."""
    if 'e' in text:
        mantissa = text.split('e')[0].lstrip('-')
        digits = len(mantissa.replace('.', '')) - 1
        as_page = lambda v: f'{v:.{digits}e}'
    else:
        decimals = len(text.split('.')[1]) if '.' in text else 0
        as_page = lambda v: f'{v:.{decimals}f}'
    return as_page, as_page(float(text))


def main():
    bin_dir, pages = sys.argv[1], sys.argv[2:]
    outputs, stale, marks = {}, [], 0
    for page in pages:
        lines = open(page, encoding='utf-8').read().split('\n')
        for i, line in enumerate(lines):
            m = MARK.match(line)
            if not m:
                continue
            marks += 1
            command = m.group(1)
            if command not in outputs:
                argv = shlex.split(command)
                run = subprocess.run([f'{bin_dir}/{argv[0]}'] + argv[1:], capture_output=True,
                                     text=True, timeout=60)
                if run.returncode != 0:
                    sys.exit(f'{page}:{i + 1}: `{command}` failed: {run.stderr.strip()}')
                outputs[command] = [float(x) for x in NUMBER.findall(run.stdout)]
            block = []
            start = i + 1
            while start < len(lines) and not lines[start].strip():
                start += 1  # the mark, a blank line, then the block
            for j in range(start, len(lines)):
                if not lines[j].strip():
                    break
                block.append((j + 1, lines[j]))
            if not block:
                sys.exit(f'{page}:{i + 1}: the mark quotes nothing (no block follows it)')
            found = 0
            for n, text in block:
                for q in NUMBER.findall(text):
                    found += 1
                    as_page, want = quoted_form(q)
                    if not any(as_page(v) == want for v in outputs[command]):
                        stale.append(f'{page}:{n}: {q} is not in the output of `{command}`')
            if found == 0:
                sys.exit(f'{page}:{i + 1}: the quoted block holds no number to check')
    for s in stale:
        print(s)
    if marks == 0:
        sys.exit('no page marks a quote')
    print(f'{marks} quotes checked, {len(stale)} stale')
    sys.exit(1 if stale else 0)


main()
