"""python -m compiler: the command line (see compiler/cli.py)."""

import sys

from compiler.cli import main

if __name__ == "__main__":
    sys.exit(main())
