#!/usr/bin/env python3
"""Every exported function that returns a result code is marked QW_MUST_CHECK.

usage: must_check.py SOURCE_DIR

Reads every header under SOURCE_DIR/src. A function declared there that
returns `enum qw_rc`, or returns `int` and is a result-code function (its
comment names QW_OK or a QW_ERR_ code, or it fills in a `struct qw_error *`),
must be declared with QW_MUST_CHECK (common/err.h), so the compiler refuses
a call that drops its result. Prints each one that is not and exits 1.
"""
import glob
import os
import re
import sys

# Functions that return a result code but whose result is not a verdict to
# check, with the reason.
ALLOWED = {
    # Returns its own `rc` argument, so a failing path can write
    # `return qw_error_set(err, rc, ...)`; a call on its own only records.
    'qw_error_set',
    # Returns a file descriptor; the code its comment names is qw_handoff_pop()'s.
    'qw_handoff_fd',
}

DECL = re.compile(
    r'(?P<comment>/\*\*(?:(?!\*/).)*\*/\s*)?'
    r'(?P<decl>^(?:QW_MUST_CHECK\s+)?(?:static\s+inline\s+)?'
    r'(?P<ret>enum\s+qw_rc|int)\s+(?P<name>qw_\w+)\s*\((?P<params>[^;{]*)\)\s*'
    r'(?:__attribute__\s*\(\(.*?\)\)\s*)?;)',
    re.S | re.M)


def result_code_function(comment, ret, params):
    if ret.startswith('enum'):
        return True
    if re.search(r'(?<!const )struct qw_error \*', params):
        return True
    return bool(re.search(r'\bQW_(OK|ERR_[A-Z_]+)\b', comment or ''))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    bad = checked = 0
    for path in sorted(glob.glob(os.path.join(root, 'src', '**', '*.h'), recursive=True)):
        text = open(path, encoding='utf-8').read()
        for m in DECL.finditer(text):
            name = m.group('name')
            if name in ALLOWED:
                continue
            if not result_code_function(m.group('comment'), m.group('ret'), m.group('params')):
                continue
            checked += 1
            if not m.group('decl').startswith('QW_MUST_CHECK'):
                line = text.count('\n', 0, m.start('decl')) + 1
                print('%s:%d: %s returns a result code but is not QW_MUST_CHECK'
                      % (os.path.relpath(path, root), line, name))
                bad += 1
    print('must_check: %d result-code functions, %d not marked' % (checked, bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
