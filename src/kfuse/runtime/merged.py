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

The kernel (its text made here, the program's kernels rendered as device functions by
``codegen/emit.render_device``, through ``Artifact.persistent_source``)::

    kf_merged<r>(kf_merged<r>_args s)           # one block of the widest kernel's threads
        for each kernel K of the run:          # a phase; a narrower kernel: several of its blocks
            K_dev(s.K's arguments, b, g, ...)  # side by side (b: the thread's group), or its warps
            __syncthreads()
        [copies, scalar arithmetic; __syncthreads(); the fori counter, the next step's clears]

Each phase's sizes, counts and serial iterations are fixed for the loop instance and compiled in
(``fixed``): its loop bounds, unrolled copies and bounds checks fold away.

Where a run ends the step, the step's first kernel (the gemv, of many blocks) is launched early
(PDL) through a wrapper of its own in the same module (``head_text``): it waits for the launch before
it first, then runs the kernel's body with its sizes compiled in; the run lets it launch at its
start (``kf_allow_next``), so the next step's blocks are placed while the run's one block works.

Which kernels: ones launched with at most ``MAX_GRID`` blocks (more would serialise blocks that
ran side by side), of whole warps, no clusters, their shared memory within one block's; a run is
two or more such kernels in a row, or one at the end of a step whose small work it takes in."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..env import switch
from ..errors import CompileError, LaunchError
from .args import facts
from .control import _values, c_expr, c_shared, counts
from .launch import KernelLaunch
from .persistent import PARAM_BYTES, SHARED_BYTES, Kernel, _Args, kernel_args, struct_members, work_fields

# on (the default): a device loop's runs of small kernels are merged; off: every kernel its own node
MODE = "on" if switch("KFUSE_LOOP_MERGE") else "off"      # a word out of on/off: a KfuseError
MAX_GRID = 1            # the most blocks a kernel may have been launched with to join a run
BLOCK = 0               # the merged block's threads, at least (0: the widest kernel's)
SIDE_BY_SIDE = True     # a kernel narrower than the block runs several of its blocks side by side
SIZES = True            # a phase's sizes and counts compiled in (fixed for the loop instance)
HEAD = True             # the step's first kernel launched early (PDL) through a wrapper that waits first
FOLD_PER_THREAD = 64    # copies, clears and saves of more entries than this a thread of the merged
                        # block stay launches of their own (grid-wide)


@dataclass(frozen=True)
class Shape:
    """What a merged launch holds: its kernels (and the blocks each was launched with), and the
    step's work it takes in after them: ``clears`` ranges, ``copies``, ``tails`` (scalar
    expressions over ``p{k}``, read from ``tail_reads`` pointers), the fori counter, and in a
    while loop the end of its step (``control.py``'s kf_loop_next: ``pred`` over ``pred_reads``
    pointers and, with ``consts``, the numbers array; ``saved`` state entries saved)."""
    kernels: tuple[Kernel, ...]
    grids: tuple[int, ...]
    clears: int = 0
    copies: int = 0
    tails: tuple = ()
    tail_reads: int = 0
    indexed: bool = False
    pred: tuple | None = None
    pred_reads: int = 0
    consts: bool = False
    saved: int = 0
    groups: tuple[int, ...] = ()      # per kernel: its blocks run side by side (groups of threads)
    block: int = 0                    # the block's threads (0: the widest kernel's)
    sizes: tuple = ()                 # per kernel: ((argument, value), ...) compiled in (``sizes``)
    allow: bool = False               # the next launch may start at once (the next step's head waits)

    @property
    def threads(self) -> int:
        return max([k.threads for k in self.kernels] + [self.block])

    def side_by_side(self, k: int) -> int:
        return self.groups[k] if self.groups else 1


def args_struct(shape: Shape, dtype, name: str) -> type[ctypes.Structure]:
    """The host's argument struct of a merged kernel, laid out as the kernel's."""
    fields: list = [(f"k{k}", kernel_args(k, kern)) for k, kern in enumerate(shape.kernels)]
    fields += work_fields(dtype, shape.clears, shape.copies, len(shape.tails), shape.tail_reads, shape.indexed)
    if shape.pred is not None:
        fields += [("ctl", ctypes.c_void_p), ("odd", ctypes.c_int), ("cst", ctypes.c_void_p)]
        fields += [(f"q{k}", ctypes.c_void_p) for k in range(shape.pred_reads)]
        for i in range(shape.saved):
            fields += [(f"svd{i}", ctypes.c_void_p), (f"svs{i}", ctypes.c_void_p), (f"svn{i}", ctypes.c_longlong)]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def kernel_text(shape: Shape, dtype, name: str) -> str:
    """The merged kernel ``name``'s text: its argument struct and the kernel."""
    struct = args_struct(shape, dtype, f"{name}_args")
    T = shape.threads
    lines = [f"// ---- {', '.join(k.name for k in shape.kernels)} of a loop step as one block's phases "
             "(runtime/merged.py)",
             f"struct {name}_args {{"]
    lines += struct_members(struct, shape.kernels)
    smem = max([k.smem for k in shape.kernels] + [1])
    lines += ["};",
              f'static_assert(sizeof({name}_args) == {ctypes.sizeof(struct)}, "{name}_args: laid out as the host\'s");',
              f'extern "C" __global__ void __launch_bounds__({T}) {name}(const __grid_constant__ {name}_args s)',
              "{",
              f"    __shared__ __align__(16) real kf_smem[{smem}];",
              "    const long long t = threadIdx.x, all = blockDim.x;",
              "    (void)t; (void)all;"]
    if shape.allow:
        lines.append("    kf_allow_next();   // the next step's first kernel may launch now: it waits for this one")
    for k, (kern, g) in enumerate(zip(shape.kernels, shape.grids)):
        G = shape.side_by_side(k)
        fewer = kern.threads * G < T
        lines.append(f"    // phase {k}: {kern.name}" + (f", {G} of its blocks side by side" if G > 1 else "")
                     + (f", {kern.threads * G} of the block's threads" if fewer else ""))
        guard = f"if (threadIdx.x < {kern.threads * G}) " if fewer else ""
        arg = f"s.k{k}"
        if shape.sizes and shape.sizes[k]:
            lines.append("    {   // its sizes and counts, fixed for the loop, compiled in")
            lines += _fixed_copy(kern, shape.sizes[k], f"s.k{k}", f"kf_k{k}")
            arg = f"kf_k{k}"
        if G > 1:
            lines.append(f"    {guard}{kern.name}_dev({arg}, threadIdx.x / {kern.threads}, {G}, kf_smem);")
        elif g == 1:
            lines.append(f"    {guard}{kern.name}_dev({arg}, 0, 1, kf_smem);")
        else:
            lines.append(f"    {guard}for (long long b = 0; b < {g}; ++b) {{")
            lines.append(f"        {kern.name}_dev({arg}, b, {g}, kf_smem);")
            if kern.smem:
                lines.append(f"        kf_bar_sync({kern.threads});   // the shared memory is the next block's")
            lines.append("    }")
        if arg != f"s.k{k}":
            lines.append("    }")
        lines.append("    __syncthreads();   // what this phase wrote is seen by the next")
    if shape.copies or shape.tails:
        lines.append("    // the step's tail: state entries passed on, returned scalar arithmetic")
        lines += [f"    for (long long e = t; e < s.cpn{i}; e += all) ((real*)s.cpd{i})[e] = ((const real*)s.cps{i})[e];"
                  for i in range(shape.copies)]
        if shape.tails:
            decls, texts = c_shared(shape.tails)
            lines.append("    if (t == 0) {")
            lines += [f"        const real* p{k} = s.r{k};" for k in range(shape.tail_reads)
                      if any(f"(*p{k})" in x for x in texts + decls)]
            lines += [f"        {d}" for d in decls]
            lines += [f"        *(real*)s.o{k} = (real)({x});" for k, x in enumerate(texts)]
            lines.append("    }")
        if shape.indexed or shape.clears or shape.pred is not None:
            lines.append("    __syncthreads();   // what comes next after every read and write above")
    if shape.indexed:
        lines.append("    if (t == 0) *s.idx += (real)1;   // the fori counter")
    if shape.clears:
        lines.append("    // the next step's reduced outputs set to their identities")
        lines += [f"    for (long long e = t; e < s.cn{i}; e += all) ((real*)s.c{i})[e] = s.cv{i};"
                  for i in range(shape.clears)]
    if shape.pred is not None:
        cond = c_expr(shape.pred)
        lines += ["    {   // the while loop's step end (control.py's kf_loop_next): count the step, save the",
                  "        // state it made and say whether the loop goes on; the flag read and the one written differ",
                  "        const int was = s.ctl[1 + s.odd];"]
        if shape.saved:
            lines.append("        if (was) {")
            lines += [f"            for (long long e = t; e < s.svn{i}; e += all) ((real*)s.svd{i})[e] = ((const real*)s.svs{i})[e];"
                      for i in range(shape.saved)]
            lines.append("        }")
        lines += ["        if (t == 0) {"]
        lines += [f"            const real* p{k} = s.q{k};" for k in range(shape.pred_reads) if f"(*p{k})" in cond]
        if shape.consts:
            lines.append("            const real* cst = s.cst;")
        lines += ["            int go = 0;",
                  "            if (was) {",
                  f"                const int holds = {cond};",
                  "                const int k = s.ctl[0] + 1;",
                  "                s.ctl[0] = k;",
                  "                s.ctl[4] = holds;",
                  "                go = k < s.ctl[3] && holds;",
                  "            }",
                  "            s.ctl[2 - s.odd] = go;",
                  "        }",
                  "    }"]
    lines += ["}", ""]
    return "\n".join(lines)


def _fixed_copy(kern: Kernel, sizes, src: str, name: str) -> list[str]:
    """C lines declaring ``name``, a copy of the argument struct ``src`` with ``sizes`` (``fixed``)
    set by offset (the host's struct: ``kernel_args``)."""
    S = kernel_args(0, kern)
    lines = [f"    {kern.name}_args {name} = {src};"]
    for i, v in sizes:
        c = "long long" if kern.args[i] is ctypes.c_longlong else "int"
        lines.append(f"    *({c}*)((char*)&{name} + {getattr(S, f'a{i}').offset}) = {int(v)}{'LL' if c == 'long long' else ''};")
    return lines


def head_text(kern: Kernel, sizes, name: str) -> str:
    """The kernel ``name``: a loop step's first kernel (``kern``, rendered as a device function)
    with its sizes compiled in, which waits for the launch before it before anything else.

    Why: the step's first kernel reads what the step before wrote, and the program's code reads
    its inputs before any wait (in a call they are written before its first kernel).  Waiting at
    the start, it can be launched early (PDL) after the step before, its blocks placed on the GPU
    while that step's last kernel still runs, instead of after it has drained."""
    S = kernel_args(0, kern)
    lines = [f"// ---- {kern.name}, a loop step's first kernel, launched early (runtime/merged.py)",
             f'static_assert(sizeof({kern.name}_args) == {ctypes.sizeof(S)}, "{kern.name}_args: laid out as the host\'s");',
             f'extern "C" __global__ void __launch_bounds__({kern.threads}) {name}(const __grid_constant__ {kern.name}_args s)',
             "{",
             f"    __shared__ __align__(16) real kf_smem[{max(kern.smem, 1)}];",
             "    kf_wait_prior();   // the step before has finished, its writes visible"]
    lines += _fixed_copy(kern, sizes, "s", "kf_k")
    lines += [f"    {kern.name}_dev(kf_k, blockIdx.x, gridDim.x, kf_smem);", "}", ""]
    return "\n".join(lines)


def foldable(tails, pred=None) -> bool:
    """Scalar arithmetic and a while loop's condition the merged kernel can compute: they read
    pointers (the condition also the numbers array), no number passed by value."""
    return not counts(tuple(tails))[1] and not _values(list(tails) + ([pred] if pred is not None else []))


def folded(inst) -> dict | None:
    """What of a loop instance's step (``runtime/loop.Instance``, read through its fields) a
    merged run that ends the step takes in -- copies, scalar arithmetic, the counter, the clears,
    a while loop's kf_loop_next: all of it (``Shape``'s fields), or None where the arithmetic or
    the condition reads numbers passed by value.  ``entries``: the longest copy, clear or save
    (``build`` takes the work in only where the merged block's threads make it in at most
    FOLD_PER_THREAD entries each)."""
    copies, _, reads = inst.tail_pointers(0)
    clears = inst._ranges(0)
    sizes = [n for _, _, n in copies] + [n for _, n, _ in clears] + [
        inst.nbytes[j] // inst.dtype.itemsize for j in inst.saved]
    if not foldable(inst.body.tails, inst.pred):
        return None
    out = {"clears": len(clears), "copies": len(copies), "tails": tuple(inst.body.tails),
           "tail_reads": len(reads), "indexed": bool(inst.body.indexed), "entries": max(sizes + [0])}
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
    if inst.body.indexed:
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
        through ``head_text``'s wrapper (``dependent``: where the binding launches kernels so),
        with its argument block's current values."""
        function, struct = self.head

        def launch(stream: int) -> None:
            st = struct()
            for i, v in enumerate(first.args.values):
                setattr(st, f"a{i}", v.value)
            KernelLaunch(function, first.grid, first.threads, _Args([st]), "kf_head", dependent).launch(stream)
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
            KernelLaunch(function, 1, shape.threads, _Args([st]), f"kf_merged{run[0]}", dependent).launch(stream)
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
        shape = Shape(kernels, tuple(L.grid for L in launches[a:e]), groups=groups, block=T, sizes=sizes,
                      allow=head and e == last, **extra)
        name = f"kf_merged{a}"
        struct = args_struct(shape, inst.dtype, f"{name}_args")
        if ctypes.sizeof(struct) + 32 > PARAM_BYTES:
            return None
        shapes[(a, e)], structs[(a, e)] = shape, struct
        texts.append(kernel_text(shape, inst.dtype, name))
    if head:
        kern0 = _kernel(first, code0)
        texts.append(head_text(kern0, fixed(first), "kf_head"))
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


__all__ = ["MODE", "MAX_GRID", "Shape", "Merged", "build", "folded", "folded_fields", "fits_block", "fixed", "head_text", "joins", "spans", "kernel_text", "runs", "args_struct"]
