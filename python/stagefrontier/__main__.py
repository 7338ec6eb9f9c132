"""`python -m stagefrontier --lib | --sf | --door`: print where the installed parts are.

    LD_PRELOAD=$(python -m stagefrontier --lib) python train.py

Exits 1, saying why, when the package holds no compiled parts (a source checkout).
"""

import argparse
import sys

from stagefrontier.installed import door_path, library_path, sf_path


def main():
    parser = argparse.ArgumentParser(prog="python -m stagefrontier", description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--lib", action="store_const", const="lib", dest="which",
                       help="the path of libstagefrontier.so")
    which.add_argument("--sf", action="store_const", const="sf", dest="which", help="the path of the sf binary")
    which.add_argument("--door", action="store_const", const="door", dest="which",
                       help="the Python door's directory (PYTHONPATH for a job started without sf run)")
    which = parser.parse_args().which
    path = {"lib": library_path, "sf": sf_path, "door": door_path}[which]()
    if path is None:
        sys.stderr.write("stagefrontier: this package holds no compiled parts (not installed from the wheel)\n")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
