#!/usr/bin/env python3
"""Transaction control is written in one place: src/db/txn.c.

usage: txn_sql.py SOURCE_DIR

Scans the C sources of the programs (src/ and tools/) for string literals
that are transaction-control SQL: a statement (at the start of the literal
or after a `;`) that is BEGIN, START TRANSACTION, COMMIT, END, ROLLBACK,
ABORT, SAVEPOINT or RELEASE. Outside src/db/txn.c such a literal is a
hand-written transaction that bypasses the helpers of db/txn.h; each is
printed and the exit status is 1.

Allowed: the `begin_sql` of a struct qw_txn_policy (the isolation level a
caller asks of qw_txn_run(), which sends it as the first statement of every
attempt: the transaction is still run by txn.c).
"""
import glob
import os
import re
import sys

HOME = os.path.join('src', 'db', 'txn.c')
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
CONTROL = re.compile(r'(?:^|;)\s*(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|ABORT|SAVEPOINT|'
                     r'RELEASE)\b')
POLICY = re.compile(r'\bbegin_sql\s*=\s*$')


def without_comments(text):
    """`text` with its C comments blanked (newlines kept, so lines keep their numbers)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text[i] in '"\'':
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    files = []
    for top in ('src', 'tools'):
        for ext in ('c', 'h'):
            files += glob.glob(os.path.join(root, top, '**', '*.' + ext), recursive=True)
    bad = 0
    for path in sorted(files):
        rel = os.path.relpath(path, root)
        if rel == HOME:
            continue
        code = without_comments(open(path, encoding='utf-8').read())
        for n, line in enumerate(code.split('\n'), 1):
            for m in LITERAL.finditer(line):
                if not CONTROL.search(m.group(1)):
                    continue
                if POLICY.search(line[:m.start()]):
                    continue
                print('%s:%d: transaction control outside %s: "%s"' % (rel, n, HOME, m.group(1)))
                bad += 1
    print('txn_sql: %d file(s) scanned, %d hand-written transaction statement(s)' % (len(files), bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
