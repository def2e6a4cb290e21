"""Enumeration: legal fusions of a program, and the implementations of each fusion.

An implementation fixes the call order, the routine variant of each call, the block size (the
``BY`` macro shared by the kernel's calls), the value of every other macro the kernel's variants
share by name (e.g. the wide variants' tile width ``TC``), the axis the serial loop walks, how many
serial iterations issue their loads together (unroll), and instances per block (unnested kernels).
Placement of each element (registers or shared memory) and barriers follow from these choices
when the kernel is built; an implementation the builder refuses (resources, mappings) is pruned,
and so is one that needs more shared memory than another differing only in call order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations, product
from math import prod
from typing import Any

from ..ir.kernel import KernelCall, KernelSpec
from ..ir.record import quick_init
from ..codegen.kernel import KernelCode, build_copies
from ..codegen.layout import replace
from ..codegen.schedule import ScheduleMemo
from ..errors import FusionError
from ..ir.graph import DependencyGraph
from ..library.schema import Library
from ..ir.program import Program
from .choices import loops_of, macro_choices, middle, strip_widths, \
    mixed_nesting, sampled_variants, variant_choices, variant_indices, whole_choice
from .legality import why_not
from .prune import MAX_SPAN_LOOP_J, Prune
from .reasons import NoImplementation, Refusal, call_set
from .shape import fusion_shape, stores_of

UNROLLS = (1, 2, 4)
SPANS = (1, 2, 4)           # nested kernels: instances across the loop axis per block
# a loop along j stacks its span's tiles along i: spans of 4 there are not built, and spans of 2
# are priced as spans of 1 (docs/design.md, "Spans along the rows")
MAX_ORDERS = 6


@dataclass(frozen=True)
class Fusion:
    calls: frozenset[int]

    def __str__(self) -> str:
        return call_set(self.calls)


@quick_init
@dataclass(frozen=True)
class Implementation:
    calls: frozenset[int]
    order: tuple[int, ...]
    variants: tuple[int, ...]       # variant index per call, in `order`
    by: int | None
    loop: str
    unroll: int
    ipb: int
    span: int = 1
    macros: tuple[tuple[str, int], ...] = ()    # other macros, by name (shared by the calls)

    def kernel_calls(self, program: Program, shared: dict | None = None) -> tuple[KernelCall, ...]:
        """The calls with their variants and macros (``shared``: kernel calls made before for
        this program, by call index, variant index and macros -- ScheduleMemo.calls)."""
        out = []
        chosen: dict[str, Any] = dict(self.macros, BY=self.by)
        for i, vi in zip(self.order, self.variants):
            call = program.calls[i]
            var = call.function.variants[vi]
            macros = tuple((m, chosen[m] if chosen.get(m) in vals else vals[0])
                           for m, vals in var.macros.items())
            if shared is None:
                out.append(KernelCall(call, var, macros))
            else:
                kc = shared.get((i, vi, macros))
                out.append(kc if kc is not None else shared.setdefault((i, vi, macros), KernelCall(call, var, macros)))
        return tuple(out)

    def spec(self, program: Program, name: str, stores: frozenset[int], shared: dict | None = None) -> KernelSpec:
        return KernelSpec(name, self.kernel_calls(program, shared), iters=0, ipb=self.ipb, stores=stores,
                          loop=self.loop, unroll=self.unroll, span=self.span)

    def describe(self, program: Program) -> str:
        kcs = self.kernel_calls(program)
        parts = [f"{kc.call.name}:{kc.variant.name}" for kc in kcs]
        extra = [f"loop {self.loop}", f"unroll {self.unroll}"] + ([f"span {self.span}"] if self.span > 1 else [])
        if self.by is not None:
            extra.insert(0, f"BY={self.by}")
        extra[1:1] = [f"{m}={v}" for m, v in self.macros]
        if max(kc.nesting for kc in kcs) == 1:
            extra.append(f"{self.ipb}/block")
        return f"[{' '.join(parts)}] " + ", ".join(extra)


@dataclass
class Space:
    """Everything enumerated for one program: legal fusions, refusals, implementations."""
    program: Program
    graph: DependencyGraph
    fusions: list[Fusion] = field(default_factory=list)
    refused: dict[frozenset[int], Refusal | NoImplementation] = field(default_factory=dict)
    impls: dict[frozenset[int], list[tuple[Implementation, KernelCode]]] = field(default_factory=dict)
    pruned: dict[frozenset[int], dict[Prune, int]] = field(default_factory=dict)
    bounded: str | None = None      # what a bounded search left out (None: exhaustive)
    shapes: dict = field(default_factory=dict, repr=False)     # implementations by fusion shape
    memo: ScheduleMemo = field(default_factory=ScheduleMemo, repr=False)    # kernels analysed
    dims: dict[int, int] | None = None      # the sizes planned for (strip widths that cannot fit are not built)


def enumerate_fusions(program: Program, graph: DependencyGraph, max_size: int = 8, budget: int | None = None,
                      on_strips_rows: bool = False) -> tuple[list[Fusion], dict[frozenset[int], Refusal]] | None:
    """Legal fusions of two or more calls, and the reason each refused candidate was refused.
    With a ``budget``: None as soon as the single calls' and the legal fusions' implementations
    would take more than ``budget`` layouts (the search then cannot be exhaustive)."""
    n = len(program.calls)
    legal, refused = [], {}
    cost = 0
    if budget is not None:
        for i in range(n):
            cost += count_builds(program, graph, frozenset({i}), budget - cost)
            if cost > budget:
                return None
    for size in range(2, min(n, max_size) + 1):
        for combo in combinations(range(n), size):
            f = frozenset(combo)
            reason = why_not(program, graph, f, on_strips_rows)
            if reason:
                refused[f] = reason
            else:
                legal.append(Fusion(f))
                if budget is not None and not mixed_nesting(program, f):
                    # vector calls on strips (strip variants only: few builds) are left out of the
                    # budget: asking for them does not turn an exhaustive search into a bounded one
                    cost += count_builds(program, graph, f, budget - cost)
                    if cost > budget:
                        return None
    return legal, refused


def _orders(graph: DependencyGraph, calls: frozenset[int], most: int = MAX_ORDERS) -> tuple[tuple[int, ...], ...]:
    """Topological orders of the calls (dependencies inside the fusion), the first ``most`` (at
    most MAX_ORDERS); kept in the graph's memo (the search asks for a fusion's more than once)."""
    got = graph.memo.get(("orders", calls, most))
    if got is not None:
        return got
    out: list[tuple[int, ...]] = []

    def rec(done: tuple[int, ...], left: frozenset[int]) -> None:
        if len(out) >= most:
            return
        if not left:
            out.append(done)
            return
        for c in sorted(left):
            if not (graph.preds[c] & left):
                rec(done + (c,), left - {c})

    rec((), calls)
    got = graph.memo[("orders", calls, most)] = tuple(out)
    return got


def count_builds(program: Program, graph: DependencyGraph, calls: frozenset[int], limit: int) -> int:
    """Kernels ``implementations`` would lay out for these calls (counting stops past ``limit``)."""
    nesting = max(program.calls[i].function.nesting for i in calls)
    total = 0
    keep = whole_choice(program, graph, calls)
    for order in _orders(graph, calls):
        for variants in product(*variant_indices(program, order)):
            if not keep(order, variants):
                continue
            by, others, ipb = macro_choices(program, order, variants, nesting)
            n = len(by) * len(loops_of(program, order, variants, nesting)) * len(ipb)
            for o in others:
                n *= len(o)
            total += n
            if total > limit:
                return total
    return total


def implementations(program: Program, graph: DependencyGraph, lib: Library, calls: frozenset[int],
                    spans: tuple[int, ...] = SPANS, sampled: bool = False, variants_of=None, shapes=None,
                    memo: ScheduleMemo | None = None, dims: dict[int, int] | None = None
                    ) -> tuple[list[tuple[Implementation, KernelCode]], dict[Prune, int]]:
    """Buildable implementations of a fusion (or of a single call), with pruning counts; a nested
    kernel's span is one of ``spans`` (instances across the loop axis per block).  ``sampled``
    (bounded search of a large script): one call order, the variant choices of
    ``sampled_variants`` (or ``variants_of(order)``), one value of each macro (BY 8 where allowed).
    ``shapes`` (a dict kept by the caller) remembers the implementations of each fusion shape
    (``fusion_shape``): a fusion of a shape seen before gets them, its own calls put in, unbuilt.
    ``memo`` (one per program) keeps the kernels' analyses (codegen/schedule.py ``ScheduleMemo``).
    ``dims`` (the sizes planned for; exhaustive search only): strips only of the widths that can fit
    them (``choices.strip_widths``)."""
    stores = stores_of(program, graph, calls)
    if shapes is None:
        return _implementations(program, graph, lib, calls, stores, spans, sampled, variants_of, memo, dims)
    idx = sorted(calls)
    key: tuple = (fusion_shape(program, graph, calls, stores), tuple(spans), sampled)
    if variants_of is not None:
        key += (tuple(tuple(v) for o in _orders(graph, calls, 1) for v in variants_of(o)),)
    if key not in shapes:
        impls, pruned = _implementations(program, graph, lib, calls, stores, spans, sampled, variants_of, memo, dims)
        pos = {c: k for k, c in enumerate(idx)}
        shapes[key] = ([(tuple(pos[c] for c in i.order), i, code) for i, code in impls], pruned)
        return list(impls), dict(pruned)        # these calls' own: nothing to put in
    found, pruned = shapes[key]
    return [(replace(i, calls=calls, order=tuple(idx[k] for k in order)), code) for order, i, code in found], dict(pruned)


def _implementations(program: Program, graph: DependencyGraph, lib: Library, calls: frozenset[int],
                     stores: frozenset[int], spans: tuple[int, ...], sampled: bool, variants_of,
                     memo: ScheduleMemo | None = None, dims: dict[int, int] | None = None
                     ) -> tuple[list[tuple[Implementation, KernelCode]], dict[Prune, int]]:
    nesting = max(program.calls[i].function.nesting for i in calls)   # 1-level calls beside 2-level ones: on strips
    pruned = {Prune.REFUSED: 0, Prune.DOMINATED: 0, Prune.UNROLLED_WITHOUT_LOOP: 0}
    built: dict[tuple, tuple[Implementation, KernelCode]] = {}
    spans = tuple(spans) if nesting == 2 else (1,)
    orders = _orders(graph, calls, 1) if sampled else _orders(graph, calls)
    keep = whole_choice(program, graph, calls)
    kernel_calls = memo.calls if memo is not None else None
    refused = dominated = unrolled = 0          # pruned, counted (added to ``pruned`` at the end)
    for order in orders:
        var_choices = ((variants_of or (lambda o: sampled_variants(program, o, memo)))(order) if sampled else
                       product(*variant_indices(program, order)))
        for variants in var_choices:
            if not keep(order, variants):
                continue
            (by_choices, other_choices, ipb_choices), loops = variant_choices(program, order, variants, nesting, memo)
            chosen = tuple(sorted(zip(order, variants)))    # the variant choices in any call order
            # a kernel on a triangle walks single tiles, one per block slot: no span
            spans_here = (1,) if any(program.calls[i].function.variants[v].triangle
                                     for i, v in zip(order, variants)) else spans
            copies_of = _copies_of(loops, spans_here)
            if sampled:
                by_choices = [8] if 8 in by_choices else middle(by_choices)
                other_choices = [middle(o) for o in other_choices]
            elif dims is not None and nesting == 2:
                fitting = strip_widths(program, order, variants, other_choices, dims)
                skipped = prod(len(o) for o in other_choices) - prod(len(o) for o in fitting)
                if skipped:
                    key = Prune.STRIPS_TOO_WIDE
                    pruned[key] = (pruned.get(key, 0) + skipped * len(by_choices) * len(ipb_choices)
                                   * sum(len(c) for c in copies_of.values()))
                other_choices = fitting
            combos = list(product(by_choices, loops, ipb_choices, product(*other_choices)))
            if combos:      # each loop axis in len(combos) / len(loops) of them
                pruned[Prune.TALL_SPANS] = pruned.get(Prune.TALL_SPANS, 0) + len(combos) // len(loops) * sum(
                    len(UNROLLS) * len(spans_here) - len(copies_of[lp]) for lp in loops)
            kcs: dict[tuple, tuple[KernelCall, ...]] = {}      # the kernel calls by (BY, macros)
            for by, loop, ipb, macros in combos:
                base = Implementation(calls, order, tuple(variants), by, loop, 1, ipb, 1, macros)
                copies = copies_of[loop]
                got = kcs.get((by, macros))
                if got is None:
                    got = kcs[(by, macros)] = base.kernel_calls(program, kernel_calls)
                try:        # the copies refused are counted, not explained: their reasons are not made
                    codes = build_copies(KernelSpec("k", got, iters=0, ipb=ipb, stores=stores, loop=loop, unroll=1,
                                                    span=1), lib, copies, memo, reasons=False)
                except FusionError:
                    refused += len(copies)
                    continue
                for (unroll, span), code in zip(copies, codes):
                    if isinstance(code, FusionError):
                        refused += 1
                        continue
                    if unroll > 1 and not code.launch.carried and not code.launch.iters:
                        # nothing to amortise across a serial loop (ir/kernel.py, KernelSpec.iterations): unrolled copies
                        # hold registers and buy nothing (docs/design.md, "Unrolling")
                        unrolled += 1
                        continue
                    impl = base if unroll == 1 and span == 1 else replace(base, unroll=unroll, span=span)
                    dominated += _keep(built, impl, code, chosen)
    pruned[Prune.REFUSED] += refused
    pruned[Prune.DOMINATED] += dominated
    pruned[Prune.UNROLLED_WITHOUT_LOOP] += unrolled
    return _without_map_exchanges(list(built.values()), pruned), pruned


@lru_cache(maxsize=None)
def _copies_of(loops: tuple[str, ...], spans: tuple[int, ...]) -> dict[str, tuple[tuple[int, int], ...]]:
    """The (unroll, span) copies built of a kernel, per loop axis ((1, 1) first); shared, read only."""
    return {lp: tuple((u, s) for u in UNROLLS for s in spans if lp != "j" or s <= MAX_SPAN_LOOP_J) for lp in loops}


def _exchanges(code: KernelCode) -> bool:
    return bool(code.barriers or code.launch.smem_bytes_per_real)


def _between_mappings(code: KernelCode) -> bool:
    """Does the kernel pass an element between routines of different mappings (through shared
    memory)?  A variant's own scratch (a local read with mapping "any") is not such an exchange."""
    if not code.placement.shared:
        return False
    ids: dict[str, set] = {}
    for s in code.steps:
        for a in s.accesses:
            if a.element in code.placement.shared and a.identity is not None:
                ids.setdefault(a.element, set()).add(a.identity)
    return any(len(v) > 1 for v in ids.values())


def _without_map_exchanges(found: list[tuple[Implementation, KernelCode]], pruned: dict[Prune, int]
                           ) -> list[tuple[Implementation, KernelCode]]:
    """Implementations passing values between calls of different mappings (shared memory, a
    barrier) are dropped when the same calls fuse without: it buys another access width, which one
    mapping also has, at a cost the calibration does not see (docs/design.md, 'Exchanges between
    mappings').  So is a map kernel needing any shared memory."""
    by_placement: dict[int, bool] = {}      # the copies of one analysis share its placement and accesses
    between = [by_placement[id(code.placement)] if id(code.placement) in by_placement
               else by_placement.setdefault(id(code.placement), _between_mappings(code)) for _, code in found]
    if any(between) and not all(between):
        pruned[Prune.BETWEEN_MAPPINGS] = sum(between)
        found = [ic for ic, b in zip(found, between) if not b]
    if not any(not code.launch.carried and not _exchanges(code) for _, code in found):
        return found
    kept = [(impl, code) for impl, code in found if code.launch.carried or not _exchanges(code)]
    if len(kept) < len(found):
        pruned[Prune.MAP_EXCHANGES] = len(found) - len(kept)
    return kept


def _keep(built, impl: Implementation, code: KernelCode, chosen: tuple) -> int:
    """Same choices in another call order: keep the one needing less shared memory (``chosen``:
    the (call, variant) pairs sorted).  1 when an implementation was dominated, else 0."""
    key = (chosen, impl.by, impl.macros, impl.loop, impl.unroll, impl.ipb, impl.span)
    old = built.get(key)
    if old is not None:
        if old[1].launch.smem_bytes_per_real <= code.launch.smem_bytes_per_real:
            return 1
        built[key] = (impl, code)
        return 1
    built[key] = (impl, code)
    return 0


EXHAUSTIVE_CALLS = 12       # scripts up to this many calls may be searched exhaustively ...
BUILD_BUDGET = 1000         # ... when their fusions' implementations take at most this many layouts
CANDIDATES_PER_CALL = 8     # bounded search: candidate fusions grown from each call
MAX_REFUSALS_KEPT = 200     # bounded search: refusal reasons kept for --explain (the rest counted)


def _neighbours(program: Program, graph: DependencyGraph) -> list[set[int]]:
    """Calls linked by a dependency or a shared input value: the calls a fusion may grow by."""
    n = len(program.calls)
    out = [set(graph.preds[i]) | set(graph.succs[i]) for i in range(n)]
    readers: dict[int, list[int]] = {}
    for c in program.calls:
        for a in c.args:
            v = getattr(a, "id", None)
            if v is not None and program.values[v].is_input:
                readers.setdefault(v, []).append(c.index)
    for calls in readers.values():
        window = sorted(set(calls))
        for k, i in enumerate(window):      # neighbours along the readers of one input (a chain, not a clique)
            for j in window[max(0, k - 2):k + 3]:
                if j != i:
                    out[i].add(j)
    return out


def grow_fusions(program: Program, graph: DependencyGraph, max_size: int = 8,
                 per_call: int = CANDIDATES_PER_CALL, on_strips_rows: bool = False) -> tuple[list[Fusion], dict, int]:
    """Bounded enumeration for large scripts: connected sets of calls grown from each call (at
    most ``per_call`` candidates from each, smallest first), each checked by the rules.  Returns
    (legal fusions, some refusals, candidates examined).  With ``on_strips_rows`` the fusions of
    vector calls on strips come from a second growth, on top of the first's (which stays the one
    without them: the other candidates are not crowded out)."""
    legal, refused, examined = _grow(program, graph, max_size, per_call, False)
    if on_strips_rows:
        more, _, extra = _grow(program, graph, max_size, per_call, True)
        have = {f.calls for f in legal}
        added = [f for f in more if mixed_nesting(program, f.calls) and f.calls not in have]
        legal += added
        for f in added:
            refused.pop(f.calls, None)
        examined += extra
    return legal, refused, examined


def _grow(program: Program, graph: DependencyGraph, max_size: int, per_call: int, on_strips_rows: bool
          ) -> tuple[list[Fusion], dict, int]:
    nbrs = _neighbours(program, graph)
    seen: set[frozenset[int]] = set()
    legal: list = []
    refused: dict[frozenset[int], Refusal] = {}
    examined = 0
    for start in range(len(program.calls)):
        frontier = [frozenset({start})]
        grown = 0
        while frontier and grown < per_call:
            nxt = []
            for f in frontier:
                for j in sorted(set().union(*(nbrs[i] for i in f)) - f):
                    if j < start:
                        continue            # grown from the smallest call only
                    g = f | {j}
                    if g in seen or len(g) > max_size:
                        continue
                    seen.add(g)
                    examined += 1
                    grown += 1
                    reason = why_not(program, graph, g, on_strips_rows)
                    if reason is None:
                        legal.append(Fusion(g))
                        nxt.append(g)
                    elif len(refused) < MAX_REFUSALS_KEPT:
                        refused[g] = reason
                    if grown >= per_call:
                        break
                if grown >= per_call:
                    break
            frontier = nxt
    return legal, refused, examined


def build_space(program: Program, lib: Library, spans: tuple[int, ...] = SPANS, exhaustive: bool | None = None,
                on_strips_rows: bool = False, dims: dict[int, int] | None = None) -> Space:
    """Every legal fusion of ``program`` and the implementations of each (and of each single call),
    nested kernels with the spans ``spans``.  A script with few calls and few implementations is
    searched exhaustively; a larger one (or ``exhaustive=False``) gets a bounded search: fusions
    grown along the dependency graph, implementations sampled (``Space.bounded`` says what).
    ``on_strips_rows``: vector calls may share a kernel with matrix calls on strips (legality.py).
    ``dims``: the sizes planned for (``implementations``)."""
    graph = DependencyGraph(program)
    space = Space(program, graph, dims=dims)
    n = len(program.calls)
    if exhaustive is not False and n <= EXHAUSTIVE_CALLS:
        found = enumerate_fusions(program, graph, budget=None if exhaustive else BUILD_BUDGET,
                                  on_strips_rows=on_strips_rows)
        if found is not None:       # within the budget (or exhaustive asked for)
            space.fusions = found[0]
            space.refused.update(found[1])
            _fill(space, lib, spans, sampled=False)
            return space
    fusions, refused, examined = grow_fusions(program, graph, on_strips_rows=on_strips_rows)
    space.fusions, space.refused = fusions, refused
    space.bounded = (f"bounded search ({n} calls): {examined} candidate fusions examined along the dependency "
                     f"graph ({len(fusions)} legal), implementations sampled (one call order, each call's k-th "
                     "variant, one value per macro), calls grouped greedily by predicted saving")
    _fill(space, lib, spans, sampled=True)
    return space


REFINE_BUILDS = 300         # bounded search: a chosen kernel searched in full when this cheap ...
REFINE_TOTAL = 1500         # ... and the script's chosen kernels together take at most this many


def refine(space: Space, lib: Library, calls: frozenset[int], score, spans: tuple[int, ...] = SPANS,
           limit: int = REFINE_BUILDS) -> None:
    """Bounded search: more implementations of a fusion the search chose.  In full when that takes
    at most ``limit`` layouts; else by changing one call's variant at a time from the best found so
    far (``score(code)``: predicted seconds) while that helps."""
    program, graph = space.program, space.graph
    if count_builds(program, graph, calls, limit) <= limit:
        impls, _ = implementations(program, graph, lib, calls, spans, shapes=space.shapes, memo=space.memo,
                                   dims=space.dims)
        space.impls[calls] = impls or space.impls[calls]
        return
    found = {(i.order, i.variants, i.by, i.loop, i.unroll, i.ipb, i.span, i.macros): (i, c)
             for i, c in space.impls[calls]}
    best = min(found.values(), key=lambda ic: score(ic[1]))
    for _ in range(3):
        order, current = best[0].order, best[0].variants
        trials = []
        for k, i in enumerate(order):
            for v, var in enumerate(program.calls[i].function.variants):
                if v != current[k] and not var.fallback:     # as choices.sampled_variants
                    trials.append(current[:k] + (v,) + current[k + 1:])
        impls, _ = implementations(program, graph, lib, calls, spans, sampled=True,
                                   variants_of=lambda o, t=trials: t if o == order else [], shapes=space.shapes, memo=space.memo)
        for im, c in impls:
            found.setdefault((im.order, im.variants, im.by, im.loop, im.unroll, im.ipb, im.span, im.macros), (im, c))
        new = min(found.values(), key=lambda ic: score(ic[1]))
        if score(new[1]) >= score(best[1]):
            break
        best = new
    # trials were pruned one at a time: prune their union
    space.impls[calls] = _without_map_exchanges(list(found.values()), space.pruned.setdefault(calls, {}))


def _fill(space: Space, lib: Library, spans, sampled: bool) -> None:
    program, graph = space.program, space.graph
    candidates = [frozenset({i}) for i in range(len(program.calls))] + [f.calls for f in space.fusions]
    for calls in candidates:
        impls, pruned = implementations(program, graph, lib, calls, spans, sampled=sampled, shapes=space.shapes,
                                        memo=space.memo, dims=space.dims)
        if sampled and not impls and len(calls) == 1:
            impls, pruned = implementations(program, graph, lib, calls, spans, shapes=space.shapes, memo=space.memo,
                                            dims=space.dims)
        space.pruned[calls] = pruned
        if impls:
            space.impls[calls] = impls
        elif len(calls) > 1:
            if not sampled or len(space.refused) < MAX_REFUSALS_KEPT:
                space.refused[calls] = NoImplementation.BUILT
        else:
            raise FusionError(f"{program.calls[min(calls)].text()}: no implementation can be built")
    space.fusions = [f for f in space.fusions if f.calls in space.impls]
