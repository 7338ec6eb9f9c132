"""stagefrontier's PyTorch door: per-step stages of an unmodified training loop.

`sf run` activates it through python/stagefrontier_boot/sitecustomize.py; by hand:

    PYTHONPATH=/path/to/stagefrontier/python/stagefrontier_boot python train.py
    # or, in the program, before or after `import torch`:
    import stagefrontier_torch; stagefrontier_torch.activate()

It does nothing until the program imports torch, nothing at all with SF_DISABLE=1 or when
libstagefrontier.so is not loaded, and records no stage while the library does not record
(a process with no rank yet) or once the program emits its own markers through
stagefrontier.step()/stage() or NVTX ranges name its steps (under NVTX_INJECTION64_PATH,
from the first "step" range on).

The rank: once torch.distributed.init_process_group returns, the door tells the library
the rank and world size of the default group (sf_declare_rank). That is how a job started
by torch.multiprocessing.spawn, with no RANK in its environment, gets its logs, and why a
RANK inherited from a parent that the job contradicts loses (the library's order is in
src/core/runtime/identity.rs). The door itself never starts the library before that: a
process that never declares a rank (mp.spawn's parent) records nothing.

Otherwise it records, with the library's ordered-stage contract and default names:

  data.next_wait           around each DataLoader iterator's __next__ (before the step
                           body opens: the library charges it to the step that uses it)
  model.fwd_loss_cpu_wall  from the call of the outermost training module until backward
                           starts, so the loss computed after the model counts too
  model.backward_cpu_wall  around torch.autograd.backward (Tensor.backward calls it)
  optim.step_cpu_wall      between the optimizer step pre- and post-hooks

A step opens at the first forward of the training module and ends at the next data wait
or forward after an optimizer step, so that with several optimizers the last one ends it.
Repeated forward/backward in one step (gradient accumulation) are expanded by the library
(@0, @1, ...). A forward under torch.no_grad() or in eval() mode, and a DataLoader read
under no_grad, belong to no step: evaluation passes are not training steps.

Group names: the description each process group is given
(`new_group(group_desc=...)`, as Megatron names its groups) is reported with the group's
members by each member, and the default group's ("default_pg"); `sf roles` checks the
roles it infers against them, never relying on them.

Collectives: on a process group NCCL does not run (gloo), the collectives and send/recv
the program issues from Python are recorded as the library records NCCL's (`_Collectives`
below), so their waits and hangs are seen; NCCL's own are left to the preload door.

Cost: a global module hook would run on every call of every module (and can disturb
torch.compile). The door installs one only until the first backward, to learn which
module is the outermost one called in training mode; it then hooks that one module and
removes the global hook. Per step it runs four Python wrappers and about ten ctypes calls.
"""

import ctypes
import functools
import importlib
import importlib.abc
import importlib.util
import os
import sys
import time

import stagefrontier as _sf

DATA = b"data.next_wait"
FORWARD = b"model.fwd_loss_cpu_wall"
BACKWARD = b"model.backward_cpu_wall"
OPTIMIZER = b"optim.step_cpu_wall"


_door = None

# How often a door whose library does not record yet asks again (seconds).
_RECHECK_S = 1.0


def activate():
    """Arms the door: now if torch is imported, else when it is. Returns whether it may
    record (SF_DISABLE unset)."""
    if os.environ.get("SF_DISABLE") == "1":
        return False
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    elif not any(isinstance(f, _TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFinder())
    return True


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `torch` is imported, wraps the real loader so that the
    door is installed once torch's own __init__ has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:  # someone else took it out already
            pass
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _InstallAfter(spec.loader)
        return spec


class _InstallAfter(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _install(module)

    def __getattr__(self, name):
        # Resource readers and the rest of the real loader's interface.
        return getattr(self._loader, name)


def _install(torch):
    global _door
    if _door is not None:
        return
    try:
        lib = _sf._library()
        if lib is None:
            return
        _door = _Door(torch, lib)
    except Exception as error:  # a torch too old or too new must not stop the job
        sys.stderr.write("stagefrontier: the PyTorch door stays shut: %s\n" % (error,))


class _Door:
    def __init__(self, torch, lib):
        self.torch = torch
        self.lib = lib
        # False once forked or once NVTX marks the steps; `recording` is the library's
        # answer, asked lazily (asking starts the library) and again at most once a second.
        self.enabled = True
        self.recording = False
        self.asked_at = None
        # None with a library older than sf_nvtx_steps.
        self.nvtx_steps = getattr(lib, "sf_nvtx_steps", None)
        self.step_open = False
        self.stage = None
        # The optimizer stepped: the step ends at the next data wait or forward.
        self.step_done = False
        self.in_backward = False
        # Until the first backward: the global hooks' nesting depth and the first
        # outermost training-mode module of the step.
        self.depth = 0
        self.candidate = None
        self.model = None
        # Reports the groups' names too: init_process_group's hook gives it the default one.
        self.collectives = None
        try:
            self._hook_process_group()
        except Exception as error:  # the steps are still worth recording
            sys.stderr.write("stagefrontier: init_process_group is not watched: %s\n" % (error,))
        try:
            collectives = _Collectives(torch, lib)
            collectives.install()
            self.collectives = collectives
        except Exception as error:  # likewise
            sys.stderr.write("stagefrontier: collectives from Python are not recorded: %s\n" % (error,))
        try:
            self._hook_data_loader()
            self._hook_backward()
            self._hook_optimizer()
            self._hook_modules_globally()
        except Exception:
            # The hooks already in place stay, passing every call through: half a door
            # would open steps that never end.
            self.enabled = False
            raise
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)
        import atexit
        atexit.register(self.finish)

    def _forked(self):
        # A DataLoader worker: the library does not record there, and neither do we.
        self.enabled = False

    def is_recording(self):
        if not self.recording:
            now = time.monotonic()
            if self.asked_at is None or now - self.asked_at >= _RECHECK_S:
                self.asked_at = now
                self.recording = bool(self.lib.sf_recording())
        return self.recording

    def active(self):
        if not self.enabled or not self.is_recording():
            return False
        if self.nvtx_steps is not None and self.nvtx_steps():
            # The program's NVTX ranges mark its steps (NVTX_INJECTION64_PATH): they are
            # its own markers, and two sources of step boundaries would cut every step
            # in two. The door stands down for good.
            self.enabled = False
        return self.enabled and not _sf.explicit

    # Markers, kept in the ordered-stage contract: one stage open at a time.
    def open(self, stage):
        if self.stage == stage:
            return
        if self.stage is not None:
            self.lib.sf_stage_end(self.stage)
        self.lib.sf_stage_begin(stage)
        self.stage = stage

    def close(self):
        if self.stage is not None:
            self.lib.sf_stage_end(self.stage)
            self.stage = None

    def begin_step(self):
        if not self.step_open:
            self.lib.sf_step_begin(-1)
            self.step_open = True

    def settle(self):
        """Ends the step whose optimizer has stepped."""
        if self.step_done:
            self.close()
            self.lib.sf_step_end()
            self.step_open = False
            self.step_done = False
            self.candidate = None

    def finish(self):
        if self.enabled and self.step_open:
            self.step_done = True
            self.settle()

    def training(self, module):
        return module.training and self.torch.is_grad_enabled()

    def forward(self, module):
        """The outermost training module is called."""
        self.settle()
        if self.training(module):
            self.begin_step()
            self.open(FORWARD)

    # The doors into torch.
    def _hook_process_group(self):
        """After init_process_group returns, the default group's rank and world size are
        the job's own word on who this process is."""
        distributed = self.torch.distributed
        if not distributed.is_available():
            return
        declare = getattr(self.lib, "sf_declare_rank", None)
        if declare is None:  # a library older than this module
            return
        declare.argtypes = [ctypes.c_int, ctypes.c_int]
        declare.restype = ctypes.c_int
        c10d = importlib.import_module("torch.distributed.distributed_c10d")
        real = c10d.init_process_group
        door = self

        @functools.wraps(real)
        def init_process_group(*args, **kwargs):
            result = real(*args, **kwargs)
            try:
                rank, world_size = distributed.get_rank(), distributed.get_world_size()
                door.recording = bool(declare(rank, world_size))
                if door.collectives is not None:
                    door.collectives.describe(distributed.group.WORLD)
            except Exception:  # never the program's problem
                pass
            return result

        c10d.init_process_group = init_process_group
        if getattr(distributed, "init_process_group", None) is real:
            distributed.init_process_group = init_process_group

    def _hook_data_loader(self):
        iterator = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
        real_next = iterator.__next__
        door = self

        def __next__(it):
            if not door.active():
                return real_next(it)
            door.settle()
            model = door.model
            if not door.torch.is_grad_enabled() or (model is not None and not model.training):
                return real_next(it)
            door.open(DATA)
            try:
                return real_next(it)
            finally:
                if door.stage == DATA:
                    door.close()

        __next__.__wrapped__ = real_next
        iterator.__next__ = __next__

    def _hook_backward(self):
        autograd = self.torch.autograd
        real_backward = autograd.backward
        door = self

        def backward(*args, **kwargs):
            if door.in_backward or not door.active():
                return real_backward(*args, **kwargs)
            if door.model is None and door.candidate is not None:
                door._choose_model(door.candidate)
            door.begin_step()
            door.open(BACKWARD)
            door.in_backward = True
            try:
                return real_backward(*args, **kwargs)
            finally:
                door.in_backward = False
                if door.stage == BACKWARD:
                    door.close()

        backward.__wrapped__ = real_backward
        backward.__doc__ = real_backward.__doc__
        autograd.backward = backward

    def _hook_optimizer(self):
        optimizer = importlib.import_module("torch.optim.optimizer")
        door = self

        def pre(opt, args, kwargs):
            if door.active():
                door.begin_step()
                door.open(OPTIMIZER)

        def post(opt, args, kwargs):
            if door.active() and door.stage == OPTIMIZER:
                door.close()
                door.step_done = True

        optimizer.register_optimizer_step_pre_hook(pre)
        optimizer.register_optimizer_step_post_hook(post)

    def _hook_modules_globally(self):
        hooks = importlib.import_module("torch.nn.modules.module")
        door = self

        def pre(module, args):
            if door.depth == 0 and door.active():
                if door.candidate is None and door.training(module):
                    door.candidate = module
                door.forward(module)
            door.depth += 1

        def post(module, args, output):
            door.depth -= 1

        self.global_hooks = [
            hooks.register_module_forward_pre_hook(pre),
            hooks.register_module_forward_hook(post, always_call=True),
        ]

    def _choose_model(self, module):
        """The first outermost training module before the first backward is the model:
        from now on only its calls are hooked."""
        for handle in self.global_hooks:
            handle.remove()
        self.global_hooks = []
        self.model = module
        door = self

        def pre(module, args):
            if door.active():
                door.forward(module)

        module.register_forward_pre_hook(pre)


# NCCL's numbering of calls, as the log's nccl_call records carry it (src/core/log/nccl_op.rs).
_ALL_REDUCE, _BROADCAST, _REDUCE, _ALL_GATHER, _REDUCE_SCATTER, _ALL_TO_ALL = 16, 17, 19, 20, 21, 22
_SEND, _RECV, _GATHER, _SCATTER = 23, 24, 25, 26

# The torch.distributed functions recorded: (op, the argument naming the root or peer).
# A barrier is an allreduce of one element, as NCCL runs it.
_RECORDED = {
    "all_reduce": (_ALL_REDUCE, None),
    "barrier": (_ALL_REDUCE, None),
    "broadcast": (_BROADCAST, "src"),
    "reduce": (_REDUCE, "dst"),
    "all_gather": (_ALL_GATHER, None),
    "all_gather_into_tensor": (_ALL_GATHER, None),
    "reduce_scatter": (_REDUCE_SCATTER, None),
    "reduce_scatter_tensor": (_REDUCE_SCATTER, None),
    "all_to_all": (_ALL_TO_ALL, None),
    "all_to_all_single": (_ALL_TO_ALL, None),
    "gather": (_GATHER, "dst"),
    "scatter": (_SCATTER, "src"),
    "send": (_SEND, "dst"),
    "isend": (_SEND, "dst"),
    "recv": (_RECV, "src"),
    "irecv": (_RECV, "src"),
}

# torch dtype name -> ncclDataType_t.
_DTYPES = {
    "int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
    "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9,
}


class _Collectives:
    """Records the collectives and send/recv a program issues from Python on a process
    group NCCL does not run (gloo): NCCL's own are recorded by the preload door, and
    recording them twice would count each wait twice. batch_isend_irecv runs through the
    isend/irecv it is given, recorded as such. An asynchronous call (async_op=True,
    isend/irecv) is recorded from its issue to the return of its Work.wait (or the
    is_completed that first finds it done), where its host waits. Not seen: DDP's gradient allreduce and
    buffer broadcast (issued from C++), and functional collectives (DTensor,
    torch.compile), which bypass these functions.

    Per call: a few argument lookups, a group lookup and two ctypes calls
    (tests/torch/bench_collectives.py measures it; docs/running.md has the figure)."""

    def __init__(self, torch, lib):
        self.torch = torch
        self.lib = lib
        self.local = __import__("threading").local()
        self.waits = None
        # id(group) -> (group, number or None when not recorded); the group is kept so
        # that its id is not reused.
        self.groups = {}
        # Groups' names not yet sent, (members' id, size, name): a group made before the
        # library records (no rank yet to write them under) waits here for the next call.
        # None with a library older than sf_py_group_desc.
        self.names = None

    def install(self):
        distributed = self.torch.distributed
        if not distributed.is_available():
            return
        if getattr(self.lib, "sf_py_call_begin", None) is None:  # an older library
            return
        self.lib.sf_py_group.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
        self.lib.sf_py_group.restype = None
        self.lib.sf_py_call_begin.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
        self.lib.sf_py_call_begin.restype = ctypes.c_int
        self.lib.sf_py_call_end.argtypes = []
        self.lib.sf_py_call_end.restype = None
        c10d = importlib.import_module("torch.distributed.distributed_c10d")
        self._install_waits(c10d)
        self._install_names(c10d)
        import inspect
        for name, (op, root) in _RECORDED.items():
            real = getattr(c10d, name, None)
            if real is None:
                continue
            wrapped = self._wrap(real, op, root, inspect.signature(real))
            setattr(c10d, name, wrapped)
            if getattr(distributed, name, None) is real:
                setattr(distributed, name, wrapped)

    def _wrap(self, real, op, root, signature):
        collectives = self
        # Where its group, root and tensors come: named or at their position (a
        # signature bind per call cost more than the rest of the wrapper).
        names = list(signature.parameters)
        at = {name: i for i, name in enumerate(names)}
        tensors = [name for name in names[:2] if name not in ("group", "src", "dst")]

        def argument(name, args, kwargs):
            if name in kwargs:
                return kwargs[name]
            i = at.get(name)
            return args[i] if i is not None and i < len(args) else None

        def begin(args, kwargs):
            """Reports the call's entry; whether the library recorded it."""
            try:
                group = argument("group", args, kwargs)
                tensor = collectives._tensor([argument(name, args, kwargs) for name in tensors])
                number = collectives._group(group, tensor)
                if number is None:
                    return False
                peer = -1
                if root is not None:
                    where = argument(root, args, kwargs)
                    if where is not None:
                        peer = collectives.torch.distributed.get_group_rank(collectives._resolve(group), where)
                count, dtype = (tensor.numel(), _DTYPES.get(str(tensor.dtype)[6:], -1)) if tensor is not None \
                    else (1, -1)
                return bool(collectives.lib.sf_py_call_begin(number, op, count, dtype, peer))
            except Exception:  # never the program's problem
                return False

        @functools.wraps(real)
        def recorded(*args, **kwargs):
            local = collectives.local
            if getattr(local, "inside", False):  # a collective built of others
                return real(*args, **kwargs)
            local.inside = True
            try:
                entered = begin(args, kwargs)
                result = None
                try:
                    result = real(*args, **kwargs)
                    return result
                finally:
                    if entered and not collectives._detach(result):
                        collectives.lib.sf_py_call_end()
            finally:
                local.inside = False

        return recorded

    # Asynchronous calls waiting for their Work.wait: id(work) -> (token, work). The work is
    # kept so that its id is not reused; at most the library's table of them.
    _DETACHED = 64

    def _install_waits(self, c10d):
        """Work.wait (and is_completed) end an asynchronous call's record: that is where
        the host waits for its peers, not where the call returned."""
        Work = getattr(c10d, "Work", None)
        if Work is None or getattr(self.lib, "sf_py_call_detach", None) is None:
            self.waits = None
            return
        self.lib.sf_py_call_detach.argtypes = []
        self.lib.sf_py_call_detach.restype = ctypes.c_uint64
        self.lib.sf_py_wait_begin.argtypes = [ctypes.c_uint64]
        self.lib.sf_py_wait_begin.restype = None
        self.lib.sf_py_wait_end.argtypes = [ctypes.c_uint64]
        self.lib.sf_py_wait_end.restype = None
        self.waits = {}
        collectives = self
        real_wait, real_completed = Work.wait, Work.is_completed

        @functools.wraps(real_wait)
        def wait(work, *args, **kwargs):
            entry = collectives.waits.pop(id(work), None)
            if entry is None:
                return real_wait(work, *args, **kwargs)
            collectives.lib.sf_py_wait_begin(entry[0])
            try:
                return real_wait(work, *args, **kwargs)
            finally:
                collectives.lib.sf_py_wait_end(entry[0])

        @functools.wraps(real_completed)
        def is_completed(work, *args, **kwargs):
            done = real_completed(work, *args, **kwargs)
            if done:
                entry = collectives.waits.pop(id(work), None)
                if entry is not None:
                    collectives.lib.sf_py_wait_end(entry[0])
            return done

        Work.wait, Work.is_completed = wait, is_completed

    def _detach(self, result):
        """Keeps an asynchronous call's record open until its Work is waited for; False
        when the call is to end now (no Work, no room, an older library)."""
        if self.waits is None or result is None or len(self.waits) >= self._DETACHED:
            return False
        if not hasattr(result, "wait"):
            return False
        try:
            token = self.lib.sf_py_call_detach()
        except Exception:  # never the program's problem
            return False
        if token:
            self.waits[id(result)] = (token, result)
        # Detached or not, the library ended or keeps the record: no sf_py_call_end.
        return True

    # Names kept while the library does not record yet: Megatron makes a few dozen groups.
    _NAMES_KEPT = 256

    def _install_names(self, c10d):
        """new_group's description and members, reported by each member: Megatron names
        every group it makes (TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP, ...), and
        sf roles checks the roles it infers against those names. Every group, NCCL's too:
        the preload door records their communicators, matched to names by members."""
        if getattr(self.lib, "sf_py_group_desc", None) is None:  # an older library
            return
        self.lib.sf_py_group_desc.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.sf_py_group_desc.restype = None
        self.names = []
        real = c10d.new_group
        collectives = self

        @functools.wraps(real)
        def new_group(*args, **kwargs):
            group = real(*args, **kwargs)
            collectives.describe(group)
            return group

        c10d.new_group = new_group
        distributed = self.torch.distributed
        if getattr(distributed, "new_group", None) is real:
            distributed.new_group = new_group

    def describe(self, group):
        """Reports `group`'s name and members when this process is a member (new_group
        gives the others a placeholder) and the name says something (torch's own
        "undefined" when none was given does not)."""
        try:
            if self.names is None or not isinstance(group, self.torch.distributed.ProcessGroup):
                return
            desc = getattr(group, "group_desc", None)
            if not desc or desc == "undefined":
                return
            ranks = sorted(self.torch.distributed.get_process_group_ranks(group))
            if len(self.names) < self._NAMES_KEPT:
                members = ",".join(str(rank) for rank in ranks)
                self.names.append((_fnv1a64(members), len(ranks), desc.encode()))
            self._send_names()
        except Exception:  # never the program's problem
            pass

    def _send_names(self):
        if self.names and self.lib.sf_recording():
            for members_id, size, desc in self.names:
                self.lib.sf_py_group_desc(members_id, size, desc, len(desc))
            self.names = []

    def _tensor(self, values):
        """The first tensor among `values` (the first of a list of them)."""
        Tensor = self.torch.Tensor
        for value in values:
            if isinstance(value, Tensor):
                return value
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], Tensor):
                return value[0]
        return None

    def _resolve(self, group):
        return group if group is not None else self.torch.distributed.distributed_c10d._get_default_group()

    def _group(self, group, tensor):
        """The group's number, reporting it the first time; None for a group NCCL runs
        (for this tensor's device) or one this process is not in. `group` None is the
        default group."""
        known = self.groups.get(id(group))
        if known is None:
            group = self._resolve(group)
            known = self.groups.get(id(group))
        if known is None:
            if not self.lib.sf_recording():
                # No rank yet: a group reported now would be lost; ask again next call.
                return None
            if self.names:
                self._send_names()
            number = None
            distributed = self.torch.distributed
            backend = str(distributed.get_backend(group)).lower()
            rank = distributed.get_rank(group)
            if rank >= 0 and not (backend == "nccl" or (tensor is not None and tensor.is_cuda and "nccl" in backend)):
                ranks = distributed.get_process_group_ranks(group)
                name = getattr(group, "group_name", "")
                number = len(self.groups) + 1
                self.lib.sf_py_group(number, _fnv1a64("%s:%s" % (name, ranks)), rank, len(ranks))
            known = (group, number)
            self.groups[id(group)] = known
            if group is self._resolve(None):
                self.groups[id(None)] = known
        return known[1]


def _fnv1a64(text):
    """The same 64-bit id on every member of a group (src/core/fnv.rs computes it too)."""
    value = 0xCBF29CE484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value
