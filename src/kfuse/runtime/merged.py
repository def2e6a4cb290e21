"""A loop step's consecutive one-block kernels as one launch: the kernels run one after the other
as phases of a single block, a block barrier between them, and the step's small work after its
kernels (state copies, returned scalar arithmetic, the fori counter, the next step's clears)
folded into the last phase where the run ends the step.

Why: at small sizes (a CG step at n = 1024) the vector kernels of a step are launched with one
block each (a sum into a scalar runs few, long blocks), and in a graph every kernel boundary
costs a launch and a drain of the GPU.  A step of a gemv and three such kernels plus its clear is
five graph nodes; merged it is two.  Run in one block, a phase reads what the phase before it
wrote after ``__syncthreads``, which makes the block's global writes (atomics included) visible
to all its threads; no pointer is ``__restrict__`` in the module (``codegen/module.py``'s
persistent source), so no load goes through the non-coherent cache.

The kernel (``ir/loop.MergedShape`` decided here, its text the loop artifact's writer's,
``LoopKernelWriter.merged``, ``codegen/loop/merged.py``; the program's kernels rendered as device
functions by ``codegen/emit.render_device``, through ``Artifact.persistent_source``)::

    kf_merged<r>(kf_merged<r>_args s)           # one block of the widest kernel's threads
        for each kernel K of the run:          # a phase; a narrower kernel: several of its blocks
            K_dev(s.K's arguments, b, g, ...)  # side by side (b: the thread's group), or its warps
            __syncthreads()
        [copies, scalar arithmetic; __syncthreads(); the fori counter, the next step's clears]

Each phase's sizes, counts and serial iterations are fixed for the loop instance and compiled in
(``fixed``): its loop bounds, unrolled copies and bounds checks fold away.

Where a run ends the step, the step's first kernel (the gemv, of many blocks) is launched early
(PDL) through a wrapper of its own in the same module (``LoopKernelWriter.head``): it waits for
the launch before it first, then runs the kernel's body with its sizes compiled in; the run lets
it launch at its start (``kf_allow_next``), so the next step's blocks are placed while the run's
one block works.

Which kernels: ones launched with at most ``MAX_GRID`` blocks (more would serialise blocks that
ran side by side), of whole warps, no clusters, their shared memory within one block's; a run is
two or more such kernels in a row, or one at the end of a step whose small work it takes in."""
from __future__ import annotations

import ctypes

from ..env import switch
from ..errors import CompileError, LaunchError
from ..ir.loop import Kernel, MergedShape, args_struct, by_value, counts, kernel_args
from .args import facts
from .launch import KernelLaunch
from .persistent import PARAM_BYTES, SHARED_BYTES, StructArgs

# on (the default): a device loop's runs of small kernels are merged; off: every kernel its own node
MODE = "on" if switch("KFUSE_LOOP_MERGE") else "off"      # a word out of on/off: a KfuseError
MAX_GRID = 1            # the most blocks a kernel may have been launched with to join a run
BLOCK = 0               # the merged block's threads, at least (0: the widest kernel's)
SIDE_BY_SIDE = True     # a kernel narrower than the block runs several of its blocks side by side
SIZES = True            # a phase's sizes and counts compiled in (fixed for the loop instance)
HEAD = True             # the step's first kernel launched early (PDL) through a wrapper that waits first
FOLD_PER_THREAD = 64    # copies, clears and saves of more entries than this a thread of the merged
                        # block stay launches of their own (grid-wide)


def foldable(tails, pred=None) -> bool:
    """Scalar arithmetic and a while loop's condition the merged kernel can compute: they read
    pointers (the condition also the numbers array), no number passed by value."""
    return not counts(tuple(tails))[1] and not by_value(list(tails) + ([pred] if pred is not None else []))


def folded(inst) -> dict | None:
    """What of a loop instance's step (``runtime/loop.Instance``, read through its fields) a
    merged run that ends the step takes in -- copies, scalar arithmetic, the counter, the clears,
    a while loop's kf_loop_next: all of it (``MergedShape``'s fields), or None where the arithmetic or
    the condition reads numbers passed by value.  ``entries``: the longest copy, clear or save
    (``build`` takes the work in only where the merged block's threads make it in at most
    FOLD_PER_THREAD entries each)."""
    copies, _, reads = inst.tail_pointers(0)
    clears = inst._ranges(0)
    sizes = [n for _, _, n in copies] + [n for _, n, _ in clears] + [
        inst.nbytes[j] // inst.dtype.itemsize for j in inst.saved]
    if not foldable(inst.art.tails, inst.pred):
        return None
    out = {"clears": len(clears), "copies": len(copies), "tails": tuple(inst.art.tails),
           "tail_reads": len(reads), "indexed": bool(inst.art.indexed), "entries": max(sizes + [0])}
    if inst.pred is not None:
        out.update(pred=inst.pred, pred_reads=len(inst.pred_reads), consts=bool(counts((inst.pred,))[1]),
                   saved=len(inst.saved))
    return out


def folded_fields(inst, p: int) -> dict:
    """The fields of step p's small work in a merged run's arguments (``folded``'s shape)."""
    copies, outs, reads = inst.tail_pointers(p)
    fields: dict = {}
    for i, (d, src, n) in enumerate(copies):
        fields.update({f"cpd{i}": d, f"cps{i}": src, f"cpn{i}": n})
    fields.update({f"o{k}": o for k, o in enumerate(outs)})
    fields.update({f"r{k}": r for k, r in enumerate(reads)})
    if inst.art.indexed:
        fields["idx"] = facts(inst.index)[4]
    for i, (ptr, n, value) in enumerate(inst._ranges(1 - p)):
        fields.update({f"c{i}": ptr, f"cn{i}": n, f"cv{i}": value})
    if inst.pred is not None:
        fields.update(ctl=facts(inst.ctl)[4], odd=p, cst=facts(inst.cst)[4])
        fields.update({f"q{k}": inst.ptr[1 - p][j] for k, j in enumerate(inst.pred_reads)})
        for i, j in enumerate(inst.saved):
            fields.update({f"svd{i}": facts(inst.saved[j])[4], f"svs{i}": inst.ptr[1 - p][j],
                           f"svn{i}": inst.nbytes[j] // inst.dtype.itemsize})
    return fields


def fixed(launch, side_by_side: int = 1) -> tuple[tuple[int, int], ...]:
    """(argument, value) of each integer argument of a loop step's kernel but its last (kf_flip,
    set per call): sizes, counts and its serial iterations (shared out among ``side_by_side``
    blocks).  A call patches only pointers and numbers (``Binding.patch``), so these hold for
    the loop instance, and a merged run compiles them in: a phase's loop bounds, unrolled copies
    and bounds checks then fold away.  One block runs a phase alone, so its time is mostly its
    instructions' latencies one after another: fewer instructions, a shorter step."""
    last = len(launch.args.values) - 2                  # iters
    return tuple((i, -(-v.value // (side_by_side if i == last else 1)))
                 for i, v in enumerate(launch.args.values[:-1]) if type(v) in (ctypes.c_longlong, ctypes.c_int))


def fits_block(threads: int, code, itemsize: int) -> bool:
    """Whether a kernel of ``threads`` can run as a device function in a block of this module (a
    merged run's phase, the step's first kernel's wrapper): whole warps, no clusters, its shared
    memory within one block's."""
    return (threads % 32 == 0 and threads <= 1024 and code.launch.cluster == 1
            and code.launch.smem_bytes_per_real * itemsize <= SHARED_BYTES)


def joins(grid: int, threads: int, code, itemsize: int) -> bool:
    """Whether a kernel launched with ``grid`` blocks of ``threads`` may join a run (see the module
    docstring; ``cost/queued.py`` prices a loop step by the same rule)."""
    return grid <= MAX_GRID and fits_block(threads, code, itemsize)


def _kernel(launch, code) -> Kernel:
    """A step's kernel as a merged module renders it: name, threads, shared entries, argument types."""
    return Kernel(launch.name, launch.threads, code.launch.smem_bytes_per_real, tuple(type(v) for v in launch.args.values))


def runs(launches, codes, itemsize: int) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive kernels that may share one block (see the module
    docstring), of any length; ``build`` decides which are worth a launch."""
    return spans([joins(L.grid, L.threads, c, itemsize) for L, c in zip(launches, codes)])


def spans(ok: list[bool]) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive True entries of ``ok``."""
    out, k = [], 0
    while k < len(ok):
        if not ok[k]:
            k += 1
            continue
        e = k
        while e < len(ok) and ok[e]:
            e += 1
        out.append((k, e))
        k = e
    return out


class Merged:
    """A loop instance's merged runs (``runtime/loop.Instance``): ``segments`` is the step's
    kernels, each a kernel index or a run (start, end); ``launcher(run, kernels, extras)`` is the
    function of a stream that launches a run with its kernels' current argument values."""

    launches = 0        # merged launches in this process (tests check that a loop used them)

    def __init__(self, segments: list, functions: dict, shapes: dict, structs: dict, folds: bool, head=None):
        self.segments, self._functions, self.shapes, self._structs = segments, functions, shapes, structs
        self.folds = folds              # the last run takes in the step's small work
        self.head = head                # (function, struct) of the step's first kernel launched early, or None

    def head_launcher(self, first, dependent: bool):
        """A function of a stream launching the step's first kernel (``first``, its launch) early
        through the head wrapper (``LoopKernelWriter.head``) (``dependent``: where the binding launches kernels so),
        with its argument block's current values."""
        function, struct = self.head

        def launch(stream: int) -> None:
            st = struct()
            for i, v in enumerate(first.args.values):
                setattr(st, f"a{i}", v.value)
            KernelLaunch(function, first.grid, first.threads, StructArgs([st]), "kf_head", dependent).launch(stream)
        return launch

    def launcher(self, run: tuple[int, int], kernels: list, extras: dict):
        """A function of a stream launching ``run`` with the values its kernels' argument blocks
        hold when it is called (the loop patches them per step), and ``extras``: the folded
        work's fields (pointers, counts, values) by name."""
        shape, struct, function = self.shapes[run], self._structs[run], self._functions[run]
        # launched early (PDL) where the run's first kernel was: its code waits for the launch
        # before it (kf_wait_prior) before it touches memory, and the later phases come after
        dependent = kernels[run[0]].dependent

        def launch(stream: int) -> None:
            Merged.launches += 1
            st = struct()
            for k, L in enumerate(kernels[run[0]:run[1]]):
                sub = getattr(st, f"k{k}")
                for i, v in enumerate(L.args.values):
                    setattr(sub, f"a{i}", v.value)
                G = shape.side_by_side(k)
                if G > 1:       # its serial iterations shared out among the blocks side by side
                    last = len(L.args.values) - 2           # iters (kf_flip is the last argument)
                    setattr(sub, f"a{last}", -(-getattr(sub, f"a{last}") // G))
            for field, v in extras.items():
                setattr(st, field, v)
            KernelLaunch(function, 1, shape.threads, StructArgs([st]), f"kf_merged{run[0]}", dependent).launch(stream)
        return launch


def build(inst, folded: dict | None) -> Merged | None:
    """The merged runs of a loop instance (``runtime/loop.Instance``, read through its fields),
    or None where there are none worth a launch or the module does not build.  ``folded``: the
    step's small work the last run may take in (``folded``'s dict), or None where it stays
    launches of its own."""
    if MODE != "on" or inst.binding.csr:
        return None
    launches, codes = inst.kernels, list(inst.binding.artifact.kernels)
    if not launches or len(codes) != len(launches):
        return None
    item = inst.dtype.itemsize
    found = runs(launches, codes, item)
    last = len(launches)
    if folded is not None:
        folded = dict(folded)
        entries = folded.pop("entries", 0)
        ends = [(a, e) for a, e in found if e == last]
        widest = max([L.threads for L in launches[ends[0][0]:last]] + [BLOCK]) if ends else 0
        if entries > FOLD_PER_THREAD * widest:
            folded = None
    work = folded is not None and any(folded.values())
    folds = work and any(e == last for _, e in found)
    found = [(a, e) for a, e in found if e - a >= 2 or (folds and e == last)]
    if not found:
        return None
    # the step's first kernel launched early where it is no run's and the last run ends the step
    # (PDL in use: the binding launches some kernel dependent)
    first, code0 = launches[0], codes[0]
    head = (HEAD and not any(a == 0 for a, _ in found) and any(e == last for _, e in found)
            and any(L.dependent for L in launches) and fits_block(first.threads, code0, item))
    shapes, structs, texts = {}, {}, []
    for a, e in found:
        kernels = tuple(_kernel(L, c) for L, c in zip(launches[a:e], codes[a:e]))
        extra = folded if (folds and folded is not None and e == last) else {}
        T = max([k.threads for k in kernels] + [BLOCK])
        # a kernel of one block, no shared memory and one instance per thread group runs as
        # several blocks side by side where the merged block is wider than it
        groups = tuple(T // L.threads if SIDE_BY_SIDE and L.grid == 1 and c.launch.smem_bytes_per_real == 0
                       and c.spec.nesting == 1 else 1 for L, c in zip(launches[a:e], codes[a:e]))
        sizes = tuple(fixed(L, G) for L, G in zip(launches[a:e], groups)) if SIZES else ()
        shape = MergedShape(kernels, tuple(L.grid for L in launches[a:e]), groups=groups, block=T, sizes=sizes,
                            allow=head and e == last, **extra)
        name = f"kf_merged{a}"
        struct = args_struct(shape, inst.dtype, f"{name}_args")
        if ctypes.sizeof(struct) + 32 > PARAM_BYTES:
            return None
        shapes[(a, e)], structs[(a, e)] = shape, struct
        texts.append(inst.art.kernels.merged(shape, inst.dtype, name))
    if head:
        kern0 = _kernel(first, code0)
        texts.append(inst.art.kernels.head(kern0, fixed(first), "kf_head"))
    from .compiler import load_module
    try:
        module = load_module(inst.binding.artifact.persistent_source("\n".join(texts)))
        functions = {run: module.get_function(f"kf_merged{run[0]}") for run in found}
        heads = (module.get_function("kf_head"), kernel_args(0, kern0)) if head else None
    except (CompileError, LaunchError):
        return None
    segments: list = []
    k = 0
    starts = {a: (a, e) for a, e in found}
    while k < last:
        if k in starts:
            segments.append(starts[k])
            k = starts[k][1]
        else:
            segments.append(k)
            k += 1
    return Merged(segments, functions, shapes, structs, folds, heads)


__all__ = ["MODE", "MAX_GRID", "Merged", "build", "folded", "folded_fields", "fits_block", "fixed", "joins", "spans",
           "runs"]
