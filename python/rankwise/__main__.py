"""``python -m rankwise ARGS...`` is ``rankwise ARGS...``: the command
this wheel installed, run in place of this interpreter (same process, so
signals and the exit code are the command's own)."""

import os
import sys

from . import executable


def main():
    try:
        exe = executable()
    except FileNotFoundError as e:
        print(f"python -m rankwise: {e}", file=sys.stderr)
        return 1
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
