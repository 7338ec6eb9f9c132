"""Where the wheel put stagefrontier's compiled parts, and the `sf` command.

The wheel carries `sf` and `libstagefrontier.so` inside this package, side by side: `sf`
finds the library next to itself, and the Python door (stagefrontier_boot) one directory
up, in site-packages. The `sf` on PATH is a console script that replaces itself with that
binary, so it keeps working under every install scheme (a venv, --user, a system prefix)
without sf having to guess where site-packages is.

In a source checkout the package holds neither: these functions return None there, and
the binaries are the ones cargo built under target/.
"""

import os
import sys

LIBRARY = "libstagefrontier.so"
SF = "sf"


def _inside(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    return path if os.path.isfile(path) else None


def library_path():
    """The installed libstagefrontier.so (for LD_PRELOAD and the injection variables), or None."""
    return _inside(LIBRARY)


def sf_path():
    """The installed sf binary, or None."""
    return _inside(SF)


def door_path():
    """The directory `sf run` puts first on PYTHONPATH to open the Python door."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "stagefrontier_boot")


def sf_command():
    """The `sf` console script: becomes the installed binary, same pid, same arguments."""
    path = sf_path()
    if path is None:
        sys.stderr.write("stagefrontier: no sf binary in %s: this copy of the package did not come from the "
                         "wheel (in a source checkout, sf is target/release/sf)\n" % os.path.dirname(__file__))
        return 1
    os.execv(path, ["sf"] + sys.argv[1:])
