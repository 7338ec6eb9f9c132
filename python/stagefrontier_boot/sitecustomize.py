"""stagefrontier's Python door, started at interpreter start-up.

`sf run` puts this directory first on PYTHONPATH; Python's `site` module then imports this
file as `sitecustomize`. It arms stagefrontier_torch (which does nothing until the
program imports torch, and records nothing in a process that never gets a rank: the rank
may come late, from init_process_group, as under torch.multiprocessing.spawn), then
runs the `sitecustomize` this one shadows, if there is one further along sys.path, as
auto-instrumentation tools do, so a site's own start-up code keeps running.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _here():
    return os.path.dirname(os.path.abspath(__file__))


def _arm():
    # The helper and the door live one directory up (the source tree's python/, or
    # site-packages when installed with pip).
    parent = os.path.dirname(_here())
    if parent not in sys.path:
        sys.path.append(parent)
    try:
        import stagefrontier_torch
        stagefrontier_torch.activate()
    except ImportError as error:  # a copy of stagefrontier_boot without its python/ beside it
        sys.stderr.write("stagefrontier: the Python door stays shut: %s (it belongs in %s, beside %s)\n"
                         % (error, parent, os.path.basename(_here())))
    except Exception as error:  # never stop the program for the door's sake
        sys.stderr.write("stagefrontier: the Python door stays shut: %s\n" % (error,))


def _chain():
    # Once per interpreter: the directory may stand on sys.path under another spelling
    # (a link), and this file must never run itself again through it.
    if getattr(sys, "_stagefrontier_chained", False):
        return
    sys._stagefrontier_chained = True
    here = os.path.realpath(_here())
    others = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    # Its errors are its own: `site` reports them as it would without the door.
    spec.loader.exec_module(module)


_arm()
_chain()
