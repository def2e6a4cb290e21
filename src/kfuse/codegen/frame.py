"""A kernel's frame: what it derives from its calls, its schedule and its instances per block --
threads, shared memory, kernel arguments, clears, sources, where it waits for the launch before
it -- the same for every (unroll, span) copy of a kernel (``layout.py``), with its checks."""
from __future__ import annotations

from functools import lru_cache
from typing import Mapping, NamedTuple

from ..errors import FusionError
from ..ir.halo import point_variant, recomputed
from ..ir.kernel import GlobalArg, KernelCall, KernelSpec
from ..ir.program import Value
from ..library.schema import REDUCE_OPS, Library
from .grids import grid_args
from .schedule import ScheduleMemo, Step, reduced_whole

MAX_SHARED_BYTES = 48 * 1024   # static shared memory per block (checked in float64, the larger type)


class Frame(NamedTuple):
    """What the kernel derives from the calls, the placement and the instances per block -- the
    same for every (unroll, span) copy of a kernel."""
    shapes: list[tuple[int, int]]       # thread shapes of the routines and accesses
    T: int                              # threads per instance
    threads: int                        # per block
    smem: int                           # shared entries per block
    extents: tuple[int, ...]
    axis_dims: tuple[int, ...]
    args: tuple[GlobalArg, ...]
    clears: tuple[tuple[Value, str], ...]
    sources: tuple[str, ...]
    wait_phase: str | None              # "pre", "loop", "post": where kf_wait_prior goes; None: none



# -- frame -----------------------------------------------------------------------------------
def frame_of(spec: KernelSpec, lib: Library, tile: tuple[int, int] | None, steps: tuple[Step, ...],
             shared_size: int, memo: ScheduleMemo | None = None, elements: Mapping | None = None) -> Frame:
    """The copy-independent part of a kernel laid out (``steps``, with ``shared_size`` shared
    entries per instance), with its checks (raises FusionError).  With a ``memo``, what does not
    depend on the instances per block (``_frame_parts``) is found once per analysis (the spec's
    other choices: the layouts of one analysis share its steps), and what does not depend on the
    steps' phases either (``_frame_base``) once for the analyses along i and along j that share
    their ``elements`` (twins, ``layout._placed``: their steps differ in phase only)."""
    parts = None
    if memo is not None:
        got = memo.frames.get(id(steps))
        parts = got[1] if got is not None and got[0] is steps else None
    if parts is None:
        if memo is None or elements is None:
            parts = _frame_parts(spec, lib, tile, steps, _frame_base(spec, lib, tile, steps, memo))
        else:
            base = memo.frame_bases.get(id(elements))
            if base is None or base[0] is not elements:
                base = memo.frame_bases[id(elements)] = (elements, _frame_base(spec, lib, tile, steps, memo))
            parts = _frame_parts(spec, lib, tile, steps, base[1])
        if memo is not None:
            memo.frames[id(steps)] = (steps, parts)
    shapes, T, refused, rest = parts
    threads = T * spec.ipb
    if threads > 1024:
        raise FusionError(f"{spec.name}: {threads} threads per block (max 1024)")
    if threads % 32:
        raise FusionError(f"{spec.name}: {threads} threads per block is not whole warps "
                          f"({T} per instance: use more instances per block)")
    if refused is not None:
        raise FusionError(refused)
    smem = shared_size * spec.ipb
    if smem * 8 > MAX_SHARED_BYTES:
        raise FusionError(f"{spec.name}: {smem} shared entries per block exceed 48 KB in float64")
    if isinstance(rest, str):
        raise FusionError(rest)
    return Frame(shapes, T, threads, smem, *rest)


def _frame_parts(spec: KernelSpec, lib: Library, tile: tuple[int, int] | None, steps: tuple[Step, ...],
                 base: tuple) -> tuple:
    """What ``make_frame`` finds that the instances per block do not change, its checks in order
    around theirs: (thread shapes, threads per instance, why the checks between the threads'
    and the shared memory's refuse (None: they do not), the frame's fields after ``smem`` or why
    the checks after the shared memory's refuse) -- ``_frame_base`` of these steps (``base``) with
    the phase ``wait_phase`` finds."""
    shapes, T, refused, rest = base
    if isinstance(rest, str):
        return base
    *fields, prior, read_ids = rest
    wait = _first_reading(prior, zip([s.phase for s in steps if s.routine is not None], read_ids)) if prior else None
    return shapes, T, refused, (*fields, wait)


def _frame_base(spec: KernelSpec, lib: Library, tile: tuple[int, int] | None, steps: tuple[Step, ...],
                memo: ScheduleMemo | None = None) -> tuple:
    """``_frame_parts`` but for what reads the steps' phases: the wait phase's place holds the
    ids of the values whose reads it waits for (``_prior``) and those each routine step reads,
    in step order.  One pass over the steps gathers what the checks, the arguments
    (``kernel_args``) and ``wait_phase`` read of them."""
    shape_set: set[tuple[int, int]] = set()
    warp_wide: list[tuple[Step, tuple[int, int]]] = []     # steps of routines exchanging lanes
    arrays: list[GlobalArg] = []
    seen_vals: set[int] = set()
    scalars: dict[int, Value] = {}
    read: list[frozenset[int]] = []    # the ids of the values each routine step reads
    halo = recomputed(spec.calls)     # values read through halo views (codegen/halo.py)
    for s in steps:
        r = s.routine
        if r is None:
            shape_set.update(a.threads for a in s.accesses)
            continue
        XY, warp, array_args, read_arrays, read_scalars, read_ids = s.kc.routine_facts(r)
        shape_set.add(XY)       # a routine's accesses have its shape (Scheduler.add_routine)
        if warp:
            warp_wide.append((s, XY))
        for g, v in zip(array_args, read_arrays):       # an array argument of each array read
            if v.id not in seen_vals and not _read_by_halo(halo, s, r, v.id):
                seen_vals.add(v.id)
                arrays.append(g)
        for v in read_scalars:
            scalars[v.id] = v
        read.append(read_ids)
    shapes = sorted(shape_set)
    T = max(X * Y for X, Y in shapes)
    refused = None
    if T < 32 and any(X * Y != T for X, Y in shapes):
        refused = f"{spec.name}: instances smaller than a warp cannot idle threads"
    else:
        for s, (X, Y) in warp_wide:
            if X * Y < T and X * Y % 32:
                assert s.routine is not None
                refused = (f"{spec.name}: {s.routine.fn} of {s.kc.call.text()} exchanges values between "
                           f"the lanes of a warp, which would run it in {X * Y} of {min(T, 32)} lanes "
                           f"({T} threads per instance)")
                break
    try:
        first = next(kc for kc in spec.calls if not kc.on_rows)
        extents = (tile if spec.nesting == 2 else (lib.subvector,))
        assert extents is not None, "a nested kernel's layout has its tile"
        axis_dims = first.call.axes
        for kc in spec.calls:
            # a call on the rows of strips walks the strips' rows: the kernel's first axis
            if kc.call.axes != axis_dims[:len(kc.call.axes)]:
                raise FusionError(f"{spec.name}: {kc.call.text()} does not share the instance space of "
                                  f"{first.call.text()}")
        # the extents of grids (none in a kernel without stencils: their steps are not looked at again)
        grids = grid_args(steps) if any(kc.call.function.grid for kc in spec.calls) else []
        args = _with_scalars(arrays + grids, scalars, axis_dims, extents, spec.cluster)
        check_param_space(spec.name, args)
    except FusionError as e:
        return shapes, T, refused, str(e)
    facts = [_call_facts(kc, memo) for kc in spec.calls]
    stores = spec.stores
    clears = tuple(c for reduced, _, _ in facts for c in reduced if c[0].id in stores)
    sources = tuple(dict.fromkeys([f for _, files, _ in facts for f in files]
                                  + [str(f) for kc in halo.values() for f in _point_files(kc)]))
    own = {v for _, _, outputs in facts for v in outputs}
    return shapes, T, refused, (tuple(extents), tuple(axis_dims), args, clears, sources,
                                _prior(own, args, clears), read)


def _read_by_halo(halo: dict[int, KernelCall], s: Step, routine, vid: int) -> bool:
    """Whether a step's routine reads value ``vid`` through a halo view (a stencil's compute
    reading a value recomputed across its halo: ``ir/halo.py``), not as an array argument."""
    return vid in halo and bool(s.kc.call.function.grid) and routine.kind == "compute"


def _point_files(kc: KernelCall) -> tuple:
    v = point_variant(kc.call.function)
    return v.files if v is not None else ()


def _call_facts(kc: KernelCall, memo: ScheduleMemo | None) -> tuple[tuple[tuple[Value, str], ...], tuple[str, ...],
                                                                    tuple[int, ...]]:
    """What a kernel's frame reads of one of its calls: (its reduced outputs a stored result of
    must be cleared before the kernel -- those not reduced whole in an instance -- with the
    reduction's identity; its variant's source files; the ids of the values bound to its
    outputs).  Kept in the ``memo`` by the kernel call's identity (a program's kernel calls are
    shared by its specs: ``ScheduleMemo.calls``)."""
    if memo is not None:
        got = memo.call_frames.get(id(kc))
        if got is not None and got[0] is kc:
            return got[1]
    binds = kc.call.bindings()
    facts = (tuple((binds[p.name], REDUCE_OPS[p.reduce]) for p in kc.call.function.outputs
                   if p.reduce and not reduced_whole(kc, p)),
             tuple(str(f) for f in kc.variant.files), tuple(v.id for v in kc.call.outputs))
    if memo is not None:
        memo.call_frames[id(kc)] = (kc, facts)
    return facts


def kernel_args(steps, axis_dims, extents, cluster: tuple[int, int] = (1, -1)) -> tuple[GlobalArg, ...]:
    """Arrays first (in order of first use), then the scalars the kernel's scalar arguments read
    (arithmetic included): script inputs by value, scalars an earlier kernel computed (a
    reduction's result) and script inputs bound to 0-d device arrays by address (``dscalar``: read
    on the device, no synchronisation with the host), then counts, iterations."""
    args: list[GlobalArg] = []
    seen_vals: set[int] = set()
    scalars: dict[int, Value] = {}
    halo = recomputed([s.kc for s in steps])
    for s in steps:
        if s.routine is None:
            continue
        for g in s.kc.array_args(s.routine):
            if g.value.id not in seen_vals and not _read_by_halo(halo, s, s.routine, g.value.id):
                seen_vals.add(g.value.id)
                args.append(g)
        for v in s.kc.routine_values(s.routine)[1]:
            scalars[v.id] = v
    return _with_scalars(args + grid_args(steps), scalars, axis_dims, extents, cluster)


def _with_scalars(arrays: list[GlobalArg], scalars: dict[int, Value], axis_dims, extents,
                  cluster: tuple[int, int]) -> tuple[GlobalArg, ...]:
    """``kernel_args`` from the arrays in order of first use and the scalars read."""
    return (tuple(arrays) + tuple(GlobalArg("scalar" if v.is_input and not v.on_device else "dscalar", v.label, v)
                                  for v in scalars.values())
            + _trailing_args(tuple(axis_dims), tuple(extents), cluster))


@lru_cache(maxsize=4096)
def _trailing_args(axis_dims: tuple[int, ...], extents: tuple[int, ...], cluster: tuple[int, int]
                   ) -> tuple[GlobalArg, ...]:
    """The arguments after the arrays and scalars: counts, iterations, the flip (made once per
    instance space: they are values)."""
    C, cax = cluster
    return (tuple(GlobalArg("count", f"n_{ax}", axis=d, divisor=e, multiple=C if k == cax else 1)
                  for k, (ax, d, e) in enumerate(zip("ij", axis_dims, extents)))
            + (GlobalArg("iters", "iters"),
               GlobalArg("flip", "kf_flip")))     # 1 on every other call: mirrored block order


MAX_PARAM_BYTES = 4096      # a kernel's parameters (CUDA's classic limit)


def check_param_space(name: str, args: tuple[GlobalArg, ...]) -> None:
    """An array passes its pointer and a 64-bit size per dimension (a csr matrix its four arrays
    and five sizes), a grid its three extents; anything else at most 8 bytes.  Arguments that fit
    at 72 bytes each (a csr matrix's, the most an argument takes) are not summed."""
    if len(args) * 72 <= MAX_PARAM_BYTES:
        return
    size = sum((9 * 8 if a.value.type == "csr" else 8 * (1 + len(a.value.dims))) if a.kind == "array" and
               a.value is not None else 24 if a.kind == "grid" else 8 for a in args)
    if size > MAX_PARAM_BYTES:
        raise FusionError(f"{name}: {len(args)} kernel arguments take {size} bytes, more than the "
                          f"{MAX_PARAM_BYTES}-byte parameter space")


def wait_phase(spec: KernelSpec, steps, args, clears) -> str | None:
    """A kernel launched while the launch before it still runs (the clear of its reduced outputs,
    or the kernel before it in the plan) waits for it (kf_wait_prior) at the start of the first
    phase that touches a cleared output or reads a value an earlier kernel wrote (any value that
    is not a script input and not written here)."""
    return _first_reading(_prior({v.id for kc in spec.calls for v in kc.call.outputs}, args, clears),
                          [(s.phase, s.kc.routine_facts(s.routine)[5]) for s in steps if s.routine is not None])


def _prior(own: set[int], args, clears) -> set[int]:
    """The ids of the values a kernel waits for the launch before it to have written (``wait_phase``;
    ``own``: the ids of the values bound to its outputs): its cleared outputs, and the values it
    reads that an earlier kernel wrote."""
    prior = {v.id for v, _ in clears}
    for g in args:
        v = g.value
        if g.kind == "array":
            if v.type != "scalar" and not v.is_input and v.id not in own:
                prior.add(v.id)
        elif g.kind == "dscalar" and not v.is_input:    # inputs: written before the call's first
            prior.add(v.id)                             # kernel, which is never launched early
    return prior


def _first_reading(prior: set[int], read) -> str | None:
    """The first phase with a step that reads one of the values of ``prior`` (``read``: the phase
    and the ids of the values read of each routine step, in step order), or None."""
    if not prior:
        return None
    reading: set[str] = set()       # the phases with a step that reads one (each step looked at once)
    for phase, ids in read:
        if phase not in reading and not prior.isdisjoint(ids):
            reading.add(phase)
    return next((ph for ph in ("pre", "loop", "post") if ph in reading), None)
