"""The ``tracejit`` command (also ``python -m runtime``).

    tracejit --version
    tracejit --help
"""

from __future__ import annotations

import argparse
import sys

from .version import __version__


def build_parser():
    parser = argparse.ArgumentParser(
        prog="tracejit",
        description="tracejit: a tracing JIT for NumPy-style model functions. "
        "This command inspects tracejit's on-disk compile cache.",
    )
    parser.add_argument("--version", action="version", version=f"tracejit {__version__}")
    return parser


def main(argv=None):
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
