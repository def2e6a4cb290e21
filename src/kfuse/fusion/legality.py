"""Legality of a fusion: each rule returns None when it allows the set of calls, else a reason.

Rules look only at the program (what the calls compute and exchange); whether a particular
implementation fits on chip is decided when its kernel is built (``FusionError``).  Reasons are
values (``reasons.py``); ``str()`` of a reason is its sentence in ``explain()``.
"""
from __future__ import annotations

from ..ir.graph import DependencyGraph
from ..ir.halo import inputs_made_inside, why_not_recomputed
from ..ir.kernel import REGISTERS_PER_SM
from ..ir.program import Call, Program, ScalarArg, Value
from .reasons import (Cycle, Dependent, GatherBarrier, IndexBarrier, Misfit, NarrowerStrip, NestingDiffers,
                      NothingShared, OnTriangle, OtherInstances, PartialsOfMap, Reason, ReductionBarrier, Refusal,
                      ScalarBarrier, SharedMatrix, SmallerCluster,
                      Spills, Uncovered, UnlinkedRows)


def _calls(program: Program, fusion: frozenset[int]) -> list[Call]:
    return [program.calls[i] for i in sorted(fusion)]


def on_rows(call: Call) -> bool:
    """Can a 1-level call run on the rows of a nested kernel's strips (a variant spanning j)?"""
    return any(v.whole for v in call.function.variants)


def on_strips(call: Call) -> bool:
    """Can a 2-level call run on strips spanning j whole, one block each (no cluster)?"""
    return any("j" in v.whole and not v.cluster for v in call.function.variants)


def same_nesting(program: Program, graph: DependencyGraph, fusion: frozenset[int],
                 on_strips_rows: bool = False) -> NestingDiffers | UnlinkedRows | None:
    """Calls of different nesting depth share a kernel only on strips, and only when asked for
    (``on_strips_rows``: ``kfuse.compile(..., vector_on_strips=True)``): the matrix calls' tiles
    span the rows (j) whole, one block each, and each vector call runs once per strip on its rows
    (a variant of its function on the rows of strips); otherwise the shallower call would run
    once per instance of the deeper one."""
    calls = _calls(program, fusion)
    depths = {c.function.nesting for c in calls}
    if len(depths) > 1:
        deep = [c for c in calls if c.function.nesting == max(depths)]
        flat = [c for c in calls if c.function.nesting == min(depths)]
        if all(map(on_rows, flat)) and all(map(on_strips, deep)) and (
                on_strips_rows or _between_products(graph, fusion, {c.index for c in deep}, flat)):
            return _unlinked_rows(graph, fusion, {c.index for c in deep}, flat)
        lacking = None if not on_strips_rows else (next((c for c in flat if not on_rows(c)), None)
                                                   or next(c for c in deep if not on_strips(c)))
        return NestingDiffers(tuple(sorted(depths)), deep[0], flat[0], on_strips_rows, lacking)
    return None


def _between_products(graph: DependencyGraph, fusion: frozenset[int], deep: set[int], flat: list[Call]) -> bool:
    """Every vector call lies between two matrix calls of the fusion: it reads, through calls of
    the fusion, what one computes and is read, likewise, by another (``A.T @ f(A @ x)``: a map of
    a gemv's result that a gemtv reads).  On strips such a fusion reads the matrix once instead of
    twice -- a whole pass saved, which the latency a vector call adds to a strip does not
    outweigh -- so it is legal without ``vector_on_strips`` (docs/design.md, 'Strips, clusters and
    bands'); vector calls after the last product (a residual's norm) still ask for it."""
    after = _reached(fusion, deep, lambda a: graph.succs[a])
    before = _reached(fusion, deep, lambda a: graph.preds[a])
    return all(c.index in after and c.index in before for c in flat)


def _reached(fusion: frozenset[int], start: set[int], step) -> set[int]:
    """The calls of ``fusion`` reached from ``start`` (included) by ``step`` (a call's neighbours)."""
    seen, todo = set(start), list(start)
    while todo:
        for b in step(todo.pop()) & fusion:
            if b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


def _unlinked_rows(graph: DependencyGraph, fusion: frozenset[int], deep: set[int], flat: list[Call]
                   ) -> UnlinkedRows | None:
    """Vector calls gain from the rows of strips only through values they share with the matrix
    calls there (a gemv's result read on its rows, a vector a gemtv reads along i): each must be
    linked to a matrix call of the fusion by values passed inside it, directly or through other
    vector calls.  An unrelated one would run on a few threads per strip beside a read of the
    whole matrix, rather than in a kernel of its own at the full width of the GPU (docs/design.md,
    'Strips, clusters and bands')."""
    reach = _reached(fusion, deep, lambda a: graph.succs[a] | graph.preds[a])
    lone = next((c for c in flat if c.index not in reach), None)
    if lone is None:
        return None
    return UnlinkedRows(lone)


def same_instances(program: Program, graph: DependencyGraph, fusion: frozenset[int]
                   ) -> OtherInstances | OnTriangle | None:
    """Producer and consumer instances must meet in one thread block: the calls must walk the same
    instance space (same dimensions along every axis; a vector call on the rows of strips walks
    the rows, the first axis of the matrix calls).  A call on a triangle (symv, trmv) walks only
    the upper tiles, one after another, and adds its output from several of them: it is never
    fused (with a call on the same triangle it could be, but its output's rows and columns both
    take atomic adds, which no other call's instance could read)."""
    calls = _calls(program, fusion)
    if len(calls) > 1:
        tri = next((c for c in calls if c.function.triangle), None)
        if tri is not None:
            return OnTriangle(tri, str(tri.function.triangle))
    first = max(calls, key=lambda c: c.function.nesting)
    for c in calls:
        if c.axes != first.axes[:len(c.axes)]:
            names = lambda call: "x".join(program.dims[d].name for d in call.axes)  # noqa: E731
            return OtherInstances(c, names(c), first, names(first))
    return None


def reduced_axes(call: Call, out) -> tuple[str, ...]:
    """The instance axes a reduced output of a call sums over (those its index leaves out)."""
    return tuple(a for a in call.function.axes if a not in out.index)


def spans_whole(prod: Call, cons: Call, axes: tuple[str, ...]) -> bool:
    """Do the library's variants let the reduction over ``axes`` of ``prod`` complete inside one
    thread block for ``cons`` to use: a variant of the producer whose tile spans those axes
    whole, and one of the consumer whose tile spans the same axes (it walks the same strips)?"""
    return any(set(axes) <= set(v.whole) for v in prod.function.variants) and \
        any(set(axes) <= set(v.whole) for v in cons.function.variants)


def one_pass_exchanges(program: Program, graph: DependencyGraph, fusion: frozenset[int]
                       ) -> list[tuple[int, int, Value, tuple[str, ...]]]:
    """(producer, consumer, value, reduced axes) of each reduction result a fused call uses whole
    (not as partial sums): legal only in one pass, with variants spanning the reduced axes."""
    out = []
    for p, c in sorted(graph.edges_within(fusion)):
        prod, cons = program.calls[p], program.calls[c]
        for v in graph.edge_values[(p, c)]:
            o = next(q for q, x in zip(prod.function.outputs, prod.outputs) if x is v)
            if not o.reduce:
                continue
            if any(x is v and not q.partial for q, x in zip(cons.function.inputs, cons.args)):
                out.append((p, c, v, reduced_axes(prod, o)))
    return out


def exchanges_on_chip(program: Program, graph: DependencyGraph, fusion: frozenset[int]
                      ) -> ScalarBarrier | GatherBarrier | IndexBarrier | ReductionBarrier | PartialsOfMap | None:
    """Every value passed between fused calls must stay in the instance that made it: the consumer
    reads the same element the producer wrote; a reduction's result is used in the kernel that
    computes it only as partial sums by an input that accumulates them linearly into a reduction
    over the same axes -- or whole, when every instance contributing to one of its entries runs
    in the same block: a variant of the producer spans the reduced axes whole (and one of the
    consumer walks the same strips), so the global barrier becomes a block barrier.  An input
    read beyond its element (``reach``: a stencil's neighbours, a gather) is read from global
    memory, where other blocks' entries are complete only after the kernel that makes them --
    except a stencil's neighbours made by a map that reads only global memory (no input made in
    the fusion): the kernel recomputes them across the halo (``ir/halo.py``).  Whether the
    rows fit that block depends on the sizes: ``fits_at`` decides per implementation."""
    made: set[int] | None = None
    for p, c in graph.edges_within(fusion):
        key = ("exchange", p, c)
        if key not in graph.memo:
            graph.memo[key] = _edge_exchange(program, graph, p, c)
        reason = graph.memo[key]
        if reason is not None:
            return reason
        for v in graph.memo.get(("halo", p, c), ()):
            if made is None:
                made = {x.id for i in fusion for x in program.calls[i].outputs}
            inside = inputs_made_inside(program.calls[p], made)
            if inside is not None:
                return GatherBarrier(program.calls[c], program.calls[p], v, "neighbours",
                                     f"{inside.name}, which it reads, is made in this kernel too")
    return None


def halo_recomputes(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> list[tuple[int, int, Value]]:
    """(producer, consumer, value) of each value a legal fusion recomputes across a stencil's halo
    (``exchanges_on_chip`` judged its edges first: ``graph.memo``)."""
    return [(p, c, v) for p, c in sorted(graph.edges_within(fusion)) for v in graph.memo.get(("halo", p, c), ())]


def _edge_exchange(program: Program, graph: DependencyGraph, p: int, c: int
                   ) -> ScalarBarrier | GatherBarrier | IndexBarrier | ReductionBarrier | PartialsOfMap | None:
    """``exchanges_on_chip`` of the edge from call p to call c alone (the first reason among its
    values; it depends on nothing else, so each edge is judged once: ``graph.memo``)."""
    prod, cons = program.calls[p], program.calls[c]
    for v in graph.edge_values[(p, c)]:
        out = next(q for q, o in zip(prod.function.outputs, prod.outputs) if o is v)
        for q, a in zip(cons.function.inputs, cons.args):
            if isinstance(a, ScalarArg) and a.reads(v):
                return ScalarBarrier(cons, prod, v)
            if a is not v:
                continue
            if q.gathered:
                why = why_not_recomputed(prod, cons, q.reach)
                if why is not None:
                    return GatherBarrier(cons, prod, v, q.reach, why if q.reach == "neighbours" else "")
                if q.index != out.index:
                    return IndexBarrier(cons, prod, v, ''.join(q.index), ''.join(out.index))
                halo = graph.memo.setdefault(("halo", p, c), [])
                if v not in halo:
                    halo.append(v)     # recomputed across the halo: exchanges_on_chip checks its inputs
                continue
            if q.index != out.index:
                return IndexBarrier(cons, prod, v, ''.join(q.index), ''.join(out.index))
            if out.reduce and not q.partial:
                axes = reduced_axes(prod, out)
                if spans_whole(prod, cons, axes):
                    continue            # one pass: the reduction completes within a block
                return ReductionBarrier(cons, prod, v, axes)
            if q.partial and not out.reduce:
                return PartialsOfMap(cons, q.name, v)
    return None


MAX_REGISTERS_PER_THREAD = 255


def fits_at(code, dims: dict[int, int], itemsize: int) -> Misfit | None:
    """A kernel whose variants span an axis whole (a strip of whole rows) is correct only where
    one instance -- or a thread-block cluster's instances, for cluster variants -- covers that
    axis at the sizes at hand, and worth it only where its elements fit the block's registers:
    None when it fits (and is the narrowest strip and the smallest cluster that cover the axis),
    else the reason.  Kernels of no such variant always fit."""
    whole = {a for kc in code.spec.calls for a in kc.variant.whole}
    if not whole:
        return None
    L = code.launch
    for n, axis in enumerate(("i", "j")[:len(L.axis_dims)]):
        if axis not in whole:
            continue
        length, extent = dims[L.axis_dims[n]], L.axis_extent[n]
        C = L.cluster if n == L.cluster_axis else 1       # blocks spanning the axis together
        if -(-length // extent) > C:
            return Uncovered(axis, length, extent, C)
        narrower = [v for kc in code.spec.calls if axis in kc.variant.whole and kc.variant.tile is not None
                    for side in [kc.variant.tile[0 if axis == "i" else 1]] if isinstance(side, str)
                    for v in kc.variant.macros[side] if length <= v * C and v < extent]
        if narrower:
            return NarrowerStrip(axis, length, extent, C)
        smaller = [c for kc in code.spec.calls if kc.variant.cluster
                   for c in kc.variant.macros[kc.variant.cluster] if length <= c * extent and c < C]
        if smaller:
            return SmallerCluster(axis, length, min(smaller), extent)
    words = L.strip_registers(itemsize)
    cap = min(MAX_REGISTERS_PER_THREAD, REGISTERS_PER_SM // L.threads)
    if words > cap:
        return Spills(words, itemsize, L.threads, cap)
    return None


def without_fallbacks(fitting: list, built: list) -> list:
    """Implementations (impl, code) that fit the sizes at hand (``fitting``, of those ``built``),
    less those giving a call a ``fallback`` variant unless implementations giving it the variant
    named there were built and none fits: row bands only where strips of whole rows were
    considered and do not fit the rows (a strip reads the same rows without partial sums)."""
    if not any(kc.variant.fallback for _, code in fitting for kc in code.spec.calls):
        return fitting          # no fallback variant: nothing to leave out

    def pairs(impls) -> set:
        return {(kc.call.index, kc.variant.name) for _, code in impls for kc in code.spec.calls}
    fits, tried = pairs(fitting), pairs(built)
    return [(impl, code) for impl, code in fitting if not any(
        kc.variant.fallback and ((kc.call.index, kc.variant.fallback) in fits or (kc.call.index, kc.variant.fallback)
                                 not in tried) for kc in code.spec.calls)]


def stalls_streams(code, fills_gpu) -> bool:
    """A kernel of several calls with a serial section in its loop (``KernelCode.serial_in_loop``)
    whose grid fills the GPU (``fills_gpu(code)``): what ``without_serial_sections`` leaves out."""
    return len(code.spec.calls) > 1 and code.serial_in_loop and fills_gpu(code)


def without_serial_sections(fitting: list, fills_gpu) -> list:
    """Implementations (impl, code) of a fusion of several calls, less those with a serial section
    in their loop (``KernelCode.serial_in_loop``) where ``fills_gpu(code)`` (more blocks than run at
    once) and an implementation without one fits.  Such a section stalls the other calls' streams
    every iteration, which the calibration (each routine timed alone) does not see; on grids of
    one wave or less leaving them out does not pay (docs/design.md, "Serial sections beside streams")."""
    stalls = [stalls_streams(code, fills_gpu) for _, code in fitting]
    if any(stalls) and not all(stalls):
        return [ic for ic, stall in zip(fitting, stalls) if not stall]
    return fitting


def fallback_lines(ranked: dict, built: dict, misfit) -> list[str]:
    """Lines of ``explain()`` for lone calls whose best implementation takes a ``fallback`` variant:
    why no implementation of the variant it stands in for fits (``misfit``: rank.Ranker.misfit,
    the reason of the widest such strip)."""
    out = []
    for calls, impls in ranked.items():
        kc = impls[0][2].spec.calls[0] if len(calls) == 1 and impls else None
        if kc is None or not kc.variant.fallback:
            continue
        stood_in = [(i, c) for i, c in built.get(calls, ()) if c.spec.calls[0].variant.name == kc.variant.fallback]
        out.append(f"  {kc.call.text()}: {kc.variant.name}, standing in for {kc.variant.fallback}: {misfit(stood_in)}")
    return out


def no_cycle_outside(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> Cycle | None:
    """No dependency path may leave the fusion and come back (that call would have to run inside)."""
    inside = down = up = 0
    for a in fusion:
        inside |= 1 << a
        down |= graph.descendants[a]
        up |= graph.ancestors[a]
    between = down & up & ~inside
    if between:
        x = (between & -between).bit_length() - 1          # the first such call
        return Cycle(program.calls[x])
    return None


def saves_traffic(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> NothingShared | None:
    """A fusion must save global transfers: its calls must be connected by values they exchange or
    inputs they share (read once for all)."""
    links: dict[int, set[int]] = {i: set() for i in fusion}
    for p, c in graph.edges_within(fusion):
        links[p].add(c)
        links[c].add(p)
    readers: dict[int, list[int]] = {}      # shared values read inside, by their readers inside
    for i in sorted(fusion):
        for v in graph.shared_of[i]:
            readers.setdefault(v, []).append(i)
    for v, inside in readers.items():
        # calls reading v as the same element are linked: each to the first such reader (the
        # same calls connected as by linking every such pair)
        first: dict[tuple[str, ...], int] = {}
        for a in inside:
            for index in _read_index(program, graph, a).get(v, ()):
                b = first.setdefault(index, a)
                if b != a:
                    links[a].add(b)
                    links[b].add(a)
    start = min(fusion)
    seen, stack = {start}, [start]
    while stack:
        for y in links[stack.pop()] - seen:
            seen.add(y)
            stack.append(y)
    if seen != set(fusion):
        return NothingShared(program.calls[min(set(fusion) - seen)])
    return None


def _read_index(program: Program, graph: DependencyGraph, c: int) -> dict[int, frozenset]:
    """Value id -> the index (instance axes) of each input of call c that reads it as an array
    (made once per call: ``graph.memo``)."""
    key = ("reads", c)
    got = graph.memo.get(key)
    if got is None:
        call = program.calls[c]
        found: dict[int, set] = {}
        for q, x in zip(call.function.inputs, call.args):
            if isinstance(x, Value):     # a gathered read shares no element with the others
                found.setdefault(x.id, set()).add((q.reach,) if q.gathered else q.index)
        got = graph.memo[key] = {vid: frozenset(ix) for vid, ix in found.items()}
    return got


def one_call_per_matrix(program: Program, graph: DependencyGraph, fusion: frozenset[int]) -> SharedMatrix | None:
    """A csr matrix is read by one call of a kernel: the rows too long for one instance are summed
    before the kernel, for that call (runtime/csr.py), into one buffer per matrix."""
    seen: dict[int, Call] = {}
    for c in _calls(program, fusion):
        for x in c.args:
            if isinstance(x, Value) and x.type == "csr":
                if x.id in seen and seen[x.id] is not c:
                    return SharedMatrix(seen[x.id], c, x)
                seen[x.id] = c
    return None


RULES = (same_nesting, same_instances, exchanges_on_chip, no_cycle_outside, saves_traffic, one_call_per_matrix)
HORIZONTAL_RULES = (same_nesting, same_instances, exchanges_on_chip, no_cycle_outside, one_call_per_matrix)


def _first_refusal(rules, program: Program, graph: DependencyGraph, fusion: frozenset[int], on_strips_rows: bool
                   ) -> Refusal | None:
    """The first of ``rules`` that refuses the fusion, as a Refusal (its name and reason)."""
    for rule in rules:
        reason = _rule(rule, program, graph, fusion, on_strips_rows)
        if reason:
            return Refusal(rule.__name__, reason)
    return None


def _rule(rule, program: Program, graph: DependencyGraph, fusion: frozenset[int], on_strips_rows: bool
          ) -> Reason | None:
    if rule is same_nesting:
        return same_nesting(program, graph, fusion, on_strips_rows)
    return rule(program, graph, fusion)


def why_not_horizontal(program: Program, graph: DependencyGraph, a: frozenset[int], b: frozenset[int],
                       on_strips_rows: bool = False) -> Dependent | Refusal | None:
    """Horizontal fusion: two kernels' calls that exchange nothing (no dependency path between
    them either way) may share a kernel -- nothing is saved in transfers, one launch is -- when
    they have one nesting depth and instance space.  None when allowed, else the reason."""
    down_a = up_a = 0
    for x in a:
        down_a |= graph.descendants[x]
        up_a |= graph.ancestors[x]
    bits = sum(1 << x for x in b)
    if (down_a | up_a) & bits:
        first, second = (a, b) if down_a & bits else (b, a)
        return Dependent(first, second)
    return _first_refusal(HORIZONTAL_RULES, program, graph, a | b, on_strips_rows)


def why_not(program: Program, graph: DependencyGraph, fusion: frozenset[int], on_strips_rows: bool = False
            ) -> Refusal | None:
    """The first rule that refuses the fusion (its name and reason); None when it is legal
    (``on_strips_rows``: vector calls may share a kernel with matrix calls on strips)."""
    if len(fusion) < 2:
        return None
    return _first_refusal(RULES, program, graph, fusion, on_strips_rows)


def stored_kernel_problem(program: Program, graph: DependencyGraph, calls: frozenset[int]) -> Refusal | None:
    """Why the calls of a kernel read from outside the planner (a tuning record) may not share
    it, or None: the rules that keep a kernel correct (one nesting and instance space, every value
    exchanged inside it complete where it is read -- no reduction read in its own kernel --, no
    cycle through other kernels, one call per matrix), not the ones that make it worth it; vector
    calls on strips are allowed (a plan tuned with ``vector_on_strips``)."""
    if len(calls) < 2:
        return None
    return _first_refusal(HORIZONTAL_RULES, program, graph, calls, True)
