#!/usr/bin/env python3
"""Prove that the build enforces the layers of src/ (docs/ARCHITECTURE.md).

usage: check_layers.py BUILD_DIR SOURCE_DIR

For each module, takes the compile command the build really uses for one of
its .c files (BUILD_DIR/compile_commands.json) and compiles small probes with
it (-fsyntax-only):
  - a header of the module itself must compile;
  - a header of a lower module compiles when the module declares that one
    in its meson.build (mod_uses), else it fails; both are fine;
  - a header of every module on the same layer or above must fail with
    "No such file or directory" (a backward or sideways include);
  - <libpq-fe.h> must resolve only in db (only the database layer talks to
    libpq).
Prints one line per probe; exits 1 when any probe does not behave.
"""
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile

# The layer diagram: a module may include only modules of a lower rank.
RANK = {'common': 0, 'db': 1, 'dlt': 1, 'config': 2, 'ingest': 2, 'admin': 3,
        'shared': 4, 'queuer': 5, 'submitter': 5, 'run': 6, 'cli': 7}


def module_command(commands, src, module):
    prefix = os.path.join(src, 'src', module) + os.sep
    for entry in commands:
        path = os.path.normpath(os.path.join(entry['directory'], entry['file']))
        if path.startswith(prefix) and path.endswith('.c'):
            args = shlex.split(entry['command'])
            keep, skip = [], False
            for a in args:
                if skip:
                    skip = False
                elif a in ('-o', '-c', '-MQ', '-MF'):
                    skip = True
                elif a not in ('-MD', '-Werror') and not a.startswith('-fdiagnostics-color'):
                    keep.append(a)
            return entry['directory'], keep
    sys.exit('check_layers.py: no compile command for src/%s (run meson setup?)' % module)


def compiles(directory, args, include, tmp):
    probe = os.path.join(tmp, 'probe.c')
    with open(probe, 'w') as f:
        f.write('#include %s\n' % include)
    r = subprocess.run(args + ['-fsyntax-only', probe], cwd=directory,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    with open(os.path.join(build, 'compile_commands.json')) as f:
        commands = json.load(f)
    header = {m: sorted(os.path.basename(h) for h in
                        glob.glob(os.path.join(src, 'src', m, '*.h')))[0] for m in RANK}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for module in RANK:
            directory, args = module_command(commands, src, module)
            for other in RANK:
                include = '"%s/%s"' % (other, header[other])
                ok, out = compiles(directory, args, include, tmp)
                if other == module:
                    want, good = 'compiles', ok
                elif RANK[other] < RANK[module]:
                    # a lower layer: allowed when the module declares it in meson
                    want, good = 'compiles' if ok else 'unused', True
                else:
                    want = 'fails'
                    good = not ok and 'No such file or directory' in out
                print('%-9s #include %-32s %-8s %s' % (module, include, want,
                                                       'ok' if good else 'WRONG'))
                if not good:
                    bad += 1
                    print(out)
            ok, out = compiles(directory, args, '<libpq-fe.h>', tmp)
            good = ok == (module == 'db')
            print('%-9s #include %-32s %-8s %s' % (module, '<libpq-fe.h>',
                                                   'compiles' if module == 'db' else 'fails',
                                                   'ok' if good else 'WRONG'))
            bad += 0 if good else 1
    print('layering: %d wrong' % bad)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
