"""Step and stage markers for stagefrontier, from Python, with no build step.

    import stagefrontier as sf
    for batch_index in range(steps):
        with sf.step():
            with sf.stage("data.next_wait"):
                batch = next(data_iter)
            with sf.stage("model.fwd_loss_cpu_wall"):
                loss = model(batch)
            ...

The calls go to libstagefrontier.so when the process runs under it (LD_PRELOAD, or any
of the injection variables that load it); otherwise every call is a no-op, so the same
script runs unchanged with and without the library.

The binding finds the library in the process's global namespace (LD_PRELOAD), or loaded
privately (RTLD_LOCAL) by the CUDA or NVTX injection, which happens when the program
first calls cuInit or NVTX, possibly long after this module was imported: until it is
found, the binding looks again at most once a second. A forked child (a DataLoader
worker) looks again too; the library itself does not record in a forked child.

Installed from the wheel, the package also holds the library and `sf`:
`stagefrontier.library_path()` (or `python -m stagefrontier --lib`) says where.
"""

import contextlib
import ctypes
import os
import sys
import time

from stagefrontier.installed import library_path, sf_path  # noqa: F401 (the package's API)

_lib = None
# When the binding last looked for the library without finding it (monotonic seconds).
_looked_at = None
# Set once the program calls step() or stage() itself: the PyTorch door then stands down,
# so that a job's own markers are never doubled.
explicit = False

_RETRY_S = 1.0


_SYMBOLS = ("sf_step_begin", "sf_step_end", "sf_stage_begin", "sf_stage_end", "sf_value", "sf_recording")
_said_missing = False


def _bind(lib):
    """The library with its functions typed, or None (said once) for one older than this
    module: a mismatched pair must not raise into the program."""
    global _said_missing
    missing = [name for name in _SYMBOLS if not hasattr(lib, name)]
    if missing:
        if not _said_missing:
            _said_missing = True
            sys.stderr.write("stagefrontier: the library loaded has no %s (older than this stagefrontier module); "
                             "markers are not recorded\n" % ", ".join(missing))
        return None
    lib.sf_step_begin.argtypes = [ctypes.c_int64]
    lib.sf_step_end.argtypes = []
    lib.sf_stage_begin.argtypes = [ctypes.c_char_p]
    lib.sf_stage_end.argtypes = [ctypes.c_char_p]
    lib.sf_value.argtypes = [ctypes.c_char_p, ctypes.c_double]
    lib.sf_recording.restype = ctypes.c_int
    return lib


def _mapped_libraries():
    """Paths of every libstagefrontier object this process has mapped."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                name = os.path.basename(path)
                if name.startswith("libstagefrontier") and ".so" in name and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths


def _find():
    try:
        process = ctypes.CDLL(None)
        if hasattr(process, "sf_step_begin"):
            return _bind(process)
    except OSError:
        pass
    # Loaded with RTLD_LOCAL: its symbols are not global, but dlopen with RTLD_NOLOAD
    # returns the loaded object (and never loads one).
    for path in _mapped_libraries():
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError:
            continue
        if hasattr(lib, "sf_step_begin"):
            return _bind(lib)
    return None


def _library():
    """The bound library, or None; looks again at most once a second while not found."""
    global _lib, _looked_at
    if _lib is not None:
        return _lib
    now = time.monotonic()
    if _looked_at is None or now - _looked_at >= _RETRY_S:
        _looked_at = now
        _lib = _find()
    return _lib


def _after_fork():
    global _lib, _looked_at
    _lib, _looked_at = None, None
    _library()


_library()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def loaded():
    """True when libstagefrontier.so is loaded in this process."""
    return _library() is not None


def recording():
    """True when the library is loaded and this process records."""
    lib = _library()
    return bool(lib is not None and lib.sf_recording())


@contextlib.contextmanager
def step(index=-1):
    """One logical step; `index` defaults to the step after the last one."""
    global explicit
    explicit = True
    lib = _library()
    if lib is None:
        yield
        return
    lib.sf_step_begin(int(index))
    try:
        yield
    finally:
        lib.sf_step_end()


@contextlib.contextmanager
def stage(name):
    """One ordered stage of the open step, e.g. "data.next_wait"."""
    global explicit
    explicit = True
    lib = _library()
    if lib is None:
        yield
        return
    encoded = name.encode()
    lib.sf_stage_begin(encoded)
    try:
        yield
    finally:
        lib.sf_stage_end(encoded)


def value(name, number):
    """A side-channel value for the open step (loss, tokens), kept out of the stages."""
    lib = _library()
    if lib is not None:
        lib.sf_value(name.encode(), float(number))
