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
"""

import contextlib
import ctypes

_lib = None
try:
    _process = ctypes.CDLL(None)
    if hasattr(_process, "sf_step_begin"):
        _lib = _process
        _lib.sf_step_begin.argtypes = [ctypes.c_int64]
        _lib.sf_stage_begin.argtypes = [ctypes.c_char_p]
        _lib.sf_stage_end.argtypes = [ctypes.c_char_p]
        _lib.sf_value.argtypes = [ctypes.c_char_p, ctypes.c_double]
        _lib.sf_recording.restype = ctypes.c_int
except OSError:
    _lib = None


def recording():
    """True when the library is loaded and this process records."""
    return bool(_lib is not None and _lib.sf_recording())


@contextlib.contextmanager
def step(index=-1):
    """One logical step; `index` defaults to the step after the last one."""
    if _lib is None:
        yield
        return
    _lib.sf_step_begin(int(index))
    try:
        yield
    finally:
        _lib.sf_step_end()


@contextlib.contextmanager
def stage(name):
    """One ordered stage of the open step, e.g. "data.next_wait"."""
    if _lib is None:
        yield
        return
    encoded = name.encode()
    _lib.sf_stage_begin(encoded)
    try:
        yield
    finally:
        _lib.sf_stage_end(encoded)


def value(name, number):
    """A side-channel value for the open step (loss, tokens), kept out of the stages."""
    if _lib is not None:
        _lib.sf_value(name.encode(), float(number))
