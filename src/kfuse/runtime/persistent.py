"""A device loop as one persistent kernel: every step's kernels run one after the other inside a
single cooperative launch, separated by grid-wide barriers, and a while loop's condition is
evaluated on the device between steps.  A whole solve is one launch and no graph.

Why: at small sizes a step is a few kernels of 1-5 us each, and in a graph every kernel boundary
costs a launch and a drain of the GPU; in one persistent kernel a boundary is a grid barrier (all
blocks resident, one atomic and a spin each), and the data a step reads is often still in L2.

The kernel (its text made here, the program's kernels rendered as device functions by
``codegen/emit.render_device``, through ``Artifact.persistent_source``)::

    kf_persistent(kf_step s0, kf_step s1, bar, ctl, cst, most)
        while k < most and cond(set k % 2):      # cond: a while loop's predicate, else true
            for each kernel K of the step:       # a phase
                clears placed in this phase
                for each of K's blocks b owned by this block: K_dev(s.K's arguments, b, ...)
                grid barrier
            [tail phase: state copies, scalar arithmetic, the fori counter, clears; barrier]
            k += 1

``kf_step`` holds one step's arguments: each kernel's argument block (the one its own launch
would take, pointers patched for one parity) and grid, and the pointers of the tail's work; ``s0``
reads buffer set 0 and writes set 1, ``s1`` the reverse, so the result of k steps is set k % 2.

The next step's reduced outputs must be cleared between their last use in this step and their
first accumulation in the next (``place_clears``): in a phase after the last kernel that touches
them in this step ("late", clearing the next step's copy), or in one before the first kernel that
touches them in the next ("early", clearing the step's own), or else in a phase of their own at
the end of the step.  The host's ``start`` clears the first step's, as for graphs."""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

from ..env import switch
from ..errors import CompileError, LaunchError
from . import driver
from .control import c_expr
from .launch import KernelLaunch, PackedArgs

PARAM_BYTES = 4000          # the kernel's parameters (both steps by value) within the 4 KB of param space
SHARED_BYTES = 48 * 1024    # static shared memory of one block
# on: device loops run as one persistent kernel wherever they can; off (the default): as graphs.
# Measured on the H100 (docs/design.md, "Loops"), a persistent step was no faster than the same
# kernels as graph nodes at any size: a phase costs about as much as a kernel boundary
MODE = "on" if switch("KFUSE_LOOP_PERSISTENT") else "off"
# blocks per multiprocessor the kernel is compiled for (__launch_bounds__' second argument): one
# kernel holds every phase's code, and the compiler keeps values live across the step loop, so
# without a bound it takes ~150-200 registers a thread and one block a multiprocessor
MIN_BLOCKS = 2


@dataclass(frozen=True)
class Kernel:
    """A kernel of the step: its name, threads per block, shared entries and argument types
    (the ctypes types of its launch's argument block, in order)."""
    name: str
    threads: int
    smem: int
    args: tuple


@dataclass(frozen=True)
class Shape:
    """What a step holds; the kernel text and the host's argument structs are both made from it.
    ``clears``: per clear, (phase, late): phase k < len(kernels) runs with kernel k, len(kernels)
    is the tail, len(kernels) + 1 a phase of clears at the end; ``late``: it clears the next
    step's copy.  ``tails``: scalar expressions over ``p{k}`` (``control.c_expr``) read from
    ``tail_reads`` pointers; ``index_late``: the fori counter advances in the last phase (a copy
    reads it)."""
    kernels: tuple[Kernel, ...]
    clears: tuple[tuple[int, bool], ...]
    copies: int
    tails: tuple
    tail_reads: int
    indexed: bool
    index_late: bool
    predicate: tuple | None
    pred_reads: int

    @property
    def tail(self) -> int:
        return len(self.kernels)

    def has_phase(self, k: int) -> bool:
        if k < self.tail:
            return True
        if k == self.tail:
            return bool(self.copies or self.tails or (self.indexed and not self.index_late)
                        or any(p == k for p, _ in self.clears))
        return (self.indexed and self.index_late) or any(p == k for p, _ in self.clears)


def _real(dtype: np.dtype):
    return ctypes.c_double if np.dtype(dtype).itemsize == 8 else ctypes.c_float


def kernel_args(k: int, kern: Kernel) -> type[ctypes.Structure]:
    """A kernel's argument block as a ctypes struct (fields a0, a1, ...)."""
    return type(f"Args{k}", (ctypes.Structure,), {"_fields_": [(f"a{i}", t) for i, t in enumerate(kern.args)]})


def work_fields(dtype, clears: int, copies: int, tails: int, tail_reads: int, indexed: bool) -> list:
    """The struct fields of a step's work after its kernels: each clear (c, cn, cv), each copy
    (cpd, cps, cpn), the scalar arithmetic's outputs (o) and reads (r), the fori counter (idx)."""
    real = _real(dtype)
    fields: list = []
    for i in range(clears):
        fields += [(f"c{i}", ctypes.c_void_p), (f"cn{i}", ctypes.c_longlong), (f"cv{i}", real)]
    for i in range(copies):
        fields += [(f"cpd{i}", ctypes.c_void_p), (f"cps{i}", ctypes.c_void_p), (f"cpn{i}", ctypes.c_longlong)]
    fields += [(f"o{k}", ctypes.c_void_p) for k in range(tails)]
    fields += [(f"r{k}", ctypes.c_void_p) for k in range(tail_reads)]
    return fields + ([("idx", ctypes.c_void_p)] if indexed else [])


@functools.lru_cache(maxsize=64)
def step_struct(shape: Shape, dtype) -> type[ctypes.Structure]:
    """The host's ``kf_step``: a ctypes struct laid out as the kernel's."""
    fields: list = []
    for k, kern in enumerate(shape.kernels):
        fields += [(f"k{k}", kernel_args(k, kern)), (f"g{k}", ctypes.c_longlong)]
    fields += work_fields(dtype, len(shape.clears), shape.copies, len(shape.tails), shape.tail_reads, shape.indexed)
    fields += [(f"q{k}", ctypes.c_void_p) for k in range(shape.pred_reads)]
    return type("KfStep", (ctypes.Structure,), {"_fields_": fields})


_C_TYPES = {ctypes.c_void_p: "real*", ctypes.c_longlong: "long long", ctypes.c_int: "int",
            ctypes.c_float: "real", ctypes.c_double: "real"}


def struct_members(struct: type[ctypes.Structure], kernels) -> list[str]:
    """The C members of a host struct of kernel argument blocks (fields k0, k1, ...: the struct
    of ``kernels[k]``'s parameters) and pointers, sizes and numbers (``ctl``: the loop's int
    control words)."""
    out = []
    for field in struct._fields_:
        name, t = field[0], field[1]
        if name.startswith("k") and name[1:].isdigit():
            out.append(f"    {kernels[int(name[1:])].name}_args {name};")
        else:
            out.append(f"    {'int*' if name == 'ctl' else _C_TYPES[t]} {name};")
    return out


def kernel_text(shape: Shape, dtype) -> str:
    """The persistent kernel's text: the step struct, the grid barrier, a step, the kernel."""
    struct = step_struct(shape, dtype)
    lines = ["// ---- the persistent kernel: every step's kernels in one launch (runtime/persistent.py)",
             "struct kf_step {   // one step's arguments (s0: set 0 -> set 1; s1: the reverse)"]
    lines += struct_members(struct, shape.kernels)
    lines += ["};",
              f'static_assert(sizeof(kf_step) == {ctypes.sizeof(struct)}, "kf_step: laid out as the host\'s");',
              "",
              "// all blocks of the grid meet (they are all resident: a cooperative launch); their writes",
              "// before it are seen by every read after it.  One atomic a block: block 0 adds 2^31 - (blocks - 1),",
              "// the others 1, so the arrivals of one barrier flip bit 31 of bar[0] (cooperative groups' scheme);",
              "// each block waits to see its bit flipped.  Release on arrival, acquire on the wait: no fences.",
              "KF_DEVICE void kf_grid_sync(unsigned* bar) {",
              "    __syncthreads();",
              "    if (threadIdx.x == 0) {",
              "        const unsigned add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;",
              "        unsigned old, now;",
              '        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(bar), "r"(add) : "memory");',
              "        do {",
              '            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");',
              "        } while (((old ^ now) & 0x80000000u) == 0);",
              "    }",
              "    __syncthreads();",
              "}",
              ""]
    most_threads = max(k.threads for k in shape.kernels)
    smem = max([k.smem for k in shape.kernels] + [1])
    lines += ["KF_DEVICE void kf_step_run(const kf_step& s, real* kf_smem, unsigned* kf_bar) {",
              "    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
              "    const long long all = (long long)gridDim.x * blockDim.x;",
              "    (void)t; (void)all;"]
    for ph in range(shape.tail + 2):
        if not shape.has_phase(ph):
            continue
        here = [i for i, (p, _) in enumerate(shape.clears) if p == ph]
        if ph < shape.tail:
            kern = shape.kernels[ph]
            lines.append(f"    // phase {ph}: {kern.name}" + (f", {kern.threads} of the block's threads"
                                                               if kern.threads < most_threads else ""))
        else:
            lines.append(f"    // phase {ph}: " + ("the step's tail" if ph == shape.tail else "clears at the end"))
        lines += [f"    for (long long e = t; e < s.cn{i}; e += all) ((real*)s.c{i})[e] = s.cv{i};"
                  + ("   // the next step's" if shape.clears[i][1] else "   // this step's") for i in here]
        if ph < shape.tail:
            kern = shape.kernels[ph]
            guard = f"if (threadIdx.x < {kern.threads}) " if kern.threads < most_threads else ""
            lines.append(f"    {guard}for (long long b = blockIdx.x; b < s.g{ph}; b += gridDim.x) {{")
            lines.append(f"        {kern.name}_dev(s.k{ph}, b, s.g{ph}, kf_smem);")
            if kern.smem:
                lines.append(f"        kf_bar_sync({kern.threads});   // the shared memory is the next block's")
            lines.append("    }")
        elif ph == shape.tail:
            lines += [f"    for (long long e = t; e < s.cpn{i}; e += all) s.cpd{i}[e] = s.cps{i}[e];"
                      for i in range(shape.copies)]
            if shape.tails or (shape.indexed and not shape.index_late):
                lines.append("    if (t == 0) {")
                exprs = [c_expr(e) for e in shape.tails]
                lines += [f"        const real* p{k} = s.r{k};" for k in range(shape.tail_reads)
                          if any(f"(*p{k})" in x for x in exprs)]
                lines += [f"        *s.o{k} = (real)({x});" for k, x in enumerate(exprs)]
                if shape.indexed and not shape.index_late:
                    lines.append("        *s.idx += (real)1;   // the fori counter")
                lines.append("    }")
        elif shape.indexed and shape.index_late:
            lines.append("    if (t == 0) *s.idx += (real)1;   // the fori counter")
        lines.append("    kf_grid_sync(kf_bar);")
    lines += ["}", ""]
    pred = shape.predicate
    if pred is not None:
        lines.append("KF_DEVICE int kf_holds(const kf_step& s, const real* cst) {   // the while loop's condition")
        cond = c_expr(pred)
        lines += [f"    const real* p{k} = s.q{k};" for k in range(shape.pred_reads) if f"(*p{k})" in cond]
        lines += ["    (void)cst;", f"    return {cond};", "}", ""]
    check = "if (!(holds = kf_holds({s}, cst))) break;" if pred is not None else ""
    lines += [
        "// ctl[0]: the steps made; ctl[4]: whether the condition held at the last check",
        f'extern "C" __global__ void __launch_bounds__({most_threads}, {max(1, min(MIN_BLOCKS, 2048 // most_threads))})',
        "kf_persistent(const __grid_constant__ kf_step s0, const __grid_constant__ kf_step s1, unsigned* kf_bar,",
        "              int* ctl, const real* cst, long long most)",
        "{",
        f"    __shared__ __align__(16) real kf_smem[{smem}];",
        "    long long k = 0;",
        "    int holds = 1;",
        "    (void)cst;",
        "    while (k < most) {",
        f"        {check.format(s='s0')}",
        "        kf_step_run(s0, kf_smem, kf_bar);",
        "        if (++k >= most) break;",
        f"        {check.format(s='s1')}",
        "        kf_step_run(s1, kf_smem, kf_bar);",
        "        ++k;",
        "    }",
    ]
    if pred is not None:
        lines.append("    if (k >= most) holds = (k & 1) ? kf_holds(s1, cst) : kf_holds(s0, cst);")
    lines += ["    if (blockIdx.x == 0 && threadIdx.x == 0) { ctl[0] = (int)k; ctl[4] = holds; }", "}"]
    return "\n".join(lines)


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
    body = inst.body
    tmp = inst.tmp.ptr if inst.tmp is not None else 0
    index = facts(inst.index)[4]

    args: list = []          # per parity: each kernel's argument values
    for p in (0, 1):
        ins, outs = inst.patches[p]
        b.patch(ins, outs, 0, tmp, [])
        args.append([[v.value for v in L.args.values] for L in launches])
    copies0, outs0, reads0 = inst.tail_pointers(0)
    tail_work = bool(copies0 or body.tails or body.indexed)
    phase_ptrs = [{v for v, t in zip(vals, k.args) if t is ctypes.c_void_p and v} for vals, k in zip(args[0], kernels)]
    if tail_work:
        phase_ptrs.append({d for d, _, _ in copies0} | {s for _, s, _ in copies0} | set(outs0) | set(reads0)
                          | ({index} if body.indexed else set()))
    last = len(phase_ptrs) - 1

    def touched(ptrs: set, rng) -> bool:
        ptr, n, _ = rng
        return any(ptr <= q < ptr + n * item for q in ptrs)
    ranges = (inst._ranges(0), inst._ranges(1))       # the clears of each parity's step
    own, nxt = ranges
    late = [max([k for k, ps in enumerate(phase_ptrs) if touched(ps, r)], default=-1) for r in nxt]
    early = [min([k for k, ps in enumerate(phase_ptrs) if touched(ps, r)], default=1 << 30) for r in own]
    clears = place_clears(late, early, last)
    shape = Shape(kernels, tuple(clears), len(copies0), tuple(body.tails), len(reads0), bool(body.indexed),
                  bool(body.indexed and any(s == index for _, s, _ in copies0)), inst.pred, len(inst.pred_reads))
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
        if body.indexed:
            st.idx = index
        for k, j in enumerate(inst.pred_reads):
            setattr(st, f"q{k}", inst.ptr[p][j])
        steps.append(st)
    try:
        with dev:
            function = compile_kernel(b.artifact.persistent_source(kernel_text(shape, inst.dtype)))
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
        args = _Args(values)
        KernelLaunch(self._function, self.grid, self.threads, args, "kf_persistent", cooperative=True).launch(stream)


class _Args(PackedArgs):
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


__all__ = ["Kernel", "Shape", "Persistent", "build", "step_struct", "kernel_text", "place_clears", "wanted"]
