#!/usr/bin/env python3
"""Make the include root of one module of src/ (run by meson at setup).

usage: include_root.py ROOT SRC_DIR MODULE...

Recreates directory ROOT holding one symbolic link per MODULE, ROOT/<m> ->
SRC_DIR/<m>, and nothing else. A module's library is compiled with only its
own ROOT on the include path (`-I ROOT`), so `#include "db/db.h"` resolves
only when db is the module itself or a module below it, and an include of a
higher layer fails with "No such file or directory".
"""
import os
import shutil
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    root, src = sys.argv[1], os.path.abspath(sys.argv[2])
    if os.path.islink(root) or os.path.isfile(root):
        os.unlink(root)
    elif os.path.isdir(root):
        shutil.rmtree(root)
    os.makedirs(root)
    for module in sys.argv[3:]:
        target = os.path.join(src, module)
        if not os.path.isdir(target):
            sys.exit('include_root.py: no module directory ' + target)
        os.symlink(target, os.path.join(root, module))


if __name__ == '__main__':
    main()
