"""A device loop as one persistent kernel: every step's kernels run one after the other inside a
single cooperative launch, separated by grid-wide barriers, and a while loop's condition is
evaluated on the device between steps.  A whole solve is one launch and no graph.

Why: at small sizes a step is a few kernels of 1-5 us each, and in a graph every kernel boundary
costs a launch and a drain of the GPU; in one persistent kernel a boundary is a grid barrier (all
blocks resident, one atomic and a spin each), and the data a step reads is often still in L2.

Here the loop instance's step is described (``ir/loop.PersistentShape``: its kernels, where each
clear goes, the tail's work), its two ``kf_step`` argument structs filled (``ir/loop.step_struct``),
and the kernel compiled and launched; its text is the loop artifact's writer's
(``LoopKernelWriter.persistent``, ``codegen/loop/persistent.py``), wrapped with the program's
kernels as device functions by ``Artifact.persistent_source``.  ``s0`` reads buffer set 0 and
writes set 1, ``s1`` the reverse, so the result of k steps is set k % 2.

The next step's reduced outputs must be cleared between their last use in this step and their
first accumulation in the next (``place_clears``): in a phase after the last kernel that touches
them in this step ("late", clearing the next step's copy), or in one before the first kernel that
touches them in the next ("early", clearing the step's own), or else in a phase of their own at
the end of the step.  The host's ``start`` clears the first step's, as for graphs."""
from __future__ import annotations

import ctypes

import numpy as np

from ..env import switch
from ..errors import CompileError, LaunchError
from ..ir import loop
from ..ir.loop import Kernel, PersistentShape, step_struct
from . import driver
from .launch import KernelLaunch, PackedArgs

PARAM_BYTES = 4000          # the kernel's parameters (both steps by value) within the 4 KB of param space
SHARED_BYTES = 48 * 1024    # static shared memory of one block
# on: device loops run as one persistent kernel wherever they can; off (the default): as graphs.
# Measured on the H100 (docs/design.md, "Loops"), a persistent step was no faster than the same
# kernels as graph nodes at any size: a phase costs about as much as a kernel boundary
MODE = "on" if switch("KFUSE_LOOP_PERSISTENT") else "off"
# blocks per multiprocessor the kernel is compiled for (``ir/loop.MIN_BLOCKS`` says why)
MIN_BLOCKS = loop.MIN_BLOCKS


def place_clears(late: list[int], early: list[int], last: int) -> list[tuple[int, bool]]:
    """The (phase, late) of each clear.  ``late[i]``: the last phase of a step that touches the
    next step's copy of clear i's range (-1: none); ``early[i]``: the first that touches the
    step's own copy (a large number: none); ``last``: the step's last phase.  Phase 0 never
    clears the next step's copy: a while loop's condition reads the step's input set just before
    it, and that set is the next step's output set."""
    out = []
    for lt, er in zip(late, early):
        if lt < last and last >= 1:
            out.append((last, True))          # after its last use in this step
        elif er > 0:
            out.append((0, False))            # before its first use in the step
        else:
            out.append((last + 1, True))      # a phase of its own at the end (after the tail)
    return out


def build(inst) -> "Persistent | None":
    """The persistent kernel of a loop instance (``runtime/loop.Instance``, read through its
    fields), or None where it cannot run one or should not (``wanted``): kernels of clusters or of
    a thread count not a multiple of 32, too much shared memory or too many parameters, no
    cooperative launches on the device, or a kernel that does not build.  ``KFUSE_LOOP_PERSISTENT=on``
    asks for it: graphs are the default (see ``MODE``)."""
    from .args import facts
    from .gpu import cupy
    if not wanted():
        return None
    b, launches = inst.binding, inst.kernels
    codes = list(b.artifact.kernels)
    if not launches or len(codes) != len(launches):
        return None
    if any(c.launch.cluster > 1 or L.threads % 32 for c, L in zip(codes, launches)):
        return None
    cp = cupy()
    dev = cp.cuda.Device(inst.device)
    if not dev.attributes.get("CooperativeLaunch", 0):
        return None
    item = inst.dtype.itemsize
    kernels = tuple(Kernel(L.name, L.threads, c.launch.smem_bytes_per_real, tuple(type(v) for v in L.args.values))
                    for c, L in zip(codes, launches))
    if max(k.smem for k in kernels) * item > SHARED_BYTES:
        return None
    threads = max(k.threads for k in kernels)
    sms = dev.attributes["MultiProcessorCount"]
    max_grid = max(L.grid for L in launches)
    art = inst.art
    tmp = inst.tmp.ptr if inst.tmp is not None else 0
    index = facts(inst.index)[4]

    args: list = []          # per parity: each kernel's argument values
    for p in (0, 1):
        ins, outs = inst.patches[p]
        b.patch(ins, outs, 0, tmp, [])
        args.append([[v.value for v in L.args.values] for L in launches])
    copies0, outs0, reads0 = inst.tail_pointers(0)
    tail_work = bool(copies0 or art.tails or art.indexed)
    phase_ptrs = [{v for v, t in zip(vals, k.args) if t is ctypes.c_void_p and v} for vals, k in zip(args[0], kernels)]
    if tail_work:
        phase_ptrs.append({d for d, _, _ in copies0} | {s for _, s, _ in copies0} | set(outs0) | set(reads0)
                          | ({index} if art.indexed else set()))
    last = len(phase_ptrs) - 1

    def touched(ptrs: set, rng) -> bool:
        ptr, n, _ = rng
        return any(ptr <= q < ptr + n * item for q in ptrs)
    ranges = (inst._ranges(0), inst._ranges(1))       # the clears of each parity's step
    own, nxt = ranges
    late = [max([k for k, ps in enumerate(phase_ptrs) if touched(ps, r)], default=-1) for r in nxt]
    early = [min([k for k, ps in enumerate(phase_ptrs) if touched(ps, r)], default=1 << 30) for r in own]
    clears = place_clears(late, early, last)
    shape = PersistentShape(kernels, tuple(clears), len(copies0), tuple(art.tails), len(reads0), bool(art.indexed),
                            bool(art.indexed and any(s == index for _, s, _ in copies0)), inst.pred,
                            len(inst.pred_reads), MIN_BLOCKS)
    struct = step_struct(shape, inst.dtype)
    if 2 * ctypes.sizeof(struct) + 32 > PARAM_BYTES:
        return None
    steps = []
    for p in (0, 1):
        st = struct()
        for k, (vals, L) in enumerate(zip(args[p], launches)):
            sub = getattr(st, f"k{k}")
            for i, v in enumerate(vals):
                setattr(sub, f"a{i}", v)
            setattr(st, f"g{k}", L.grid)
        for i, (_, is_late) in enumerate(clears):
            ptr, n, value = ranges[1 - p if is_late else p][i]
            setattr(st, f"c{i}", ptr)
            setattr(st, f"cn{i}", n)
            setattr(st, f"cv{i}", value)
        copies, outs, reads = inst.tail_pointers(p)
        for i, (d, src, n) in enumerate(copies):
            setattr(st, f"cpd{i}", d)
            setattr(st, f"cps{i}", src)
            setattr(st, f"cpn{i}", n)
        for k, o in enumerate(outs):
            setattr(st, f"o{k}", o)
        for k, r in enumerate(reads):
            setattr(st, f"r{k}", r)
        if art.indexed:
            st.idx = index
        for k, j in enumerate(inst.pred_reads):
            setattr(st, f"q{k}", inst.ptr[p][j])
        steps.append(st)
    try:
        with dev:
            function = compile_kernel(b.artifact.persistent_source(art.kernels.persistent(shape, inst.dtype)))
            resident = sms * driver.max_active_blocks(function, threads)
    except LaunchError:
        return None
    if resident < 1:
        return None
    return Persistent(function, min(max_grid, resident), threads, steps, inst.device)


class Persistent:
    """The persistent kernel of one loop instance (``runtime/loop.Instance``), built by
    ``build``."""

    def __init__(self, function, grid: int, threads: int, steps: list, device: int):
        self.grid, self.threads, self.device = grid, threads, device
        self.steps = steps                                  # the two kf_step structs
        from .gpu import cupy
        with cupy().cuda.Device(device):
            self.bar = cupy().zeros(1, np.uint32)
        self.most = ctypes.c_longlong(0)
        self._function = function

    launches = 0        # persistent launches in this process (tests check that a loop ran as one)

    def launch(self, stream: int, ctl: int, cst: int, most: int) -> None:
        Persistent.launches += 1
        self.most.value = most
        values = [self.steps[0], self.steps[1], ctypes.c_void_p(self.bar.data.ptr), ctypes.c_void_p(ctl),
                  ctypes.c_void_p(cst), self.most]
        args = StructArgs(values)
        KernelLaunch(self._function, self.grid, self.threads, args, "kf_persistent", cooperative=True).launch(stream)


class StructArgs(PackedArgs):
    """A launch's argument block of ctypes values (structs by value among them)."""

    def __init__(self, values: list):   # noqa: D107 - no PackedArgs conversion: the values are ctypes already
        self.values = values
        self.pointers = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])


def wanted() -> bool:
    """Whether loops should run as a persistent kernel (``KFUSE_LOOP_PERSISTENT``: on or off)."""
    return MODE == "on"


def compile_kernel(source: str):
    from .compiler import load_module
    try:
        return load_module(source).get_function("kf_persistent")
    except CompileError as e:
        raise LaunchError(f"the persistent loop kernel did not build: {e}") from e


__all__ = ["MIN_BLOCKS", "MODE", "PARAM_BYTES", "Persistent", "SHARED_BYTES", "build", "place_clears", "wanted"]
