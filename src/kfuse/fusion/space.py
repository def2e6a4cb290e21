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
from itertools import combinations, product

from ..ir.kernel import KernelCall, KernelSpec
from ..codegen.kernel import KernelCode, build_copies
from ..errors import FusionError
from ..ir.graph import DependencyGraph
from ..library.schema import AXES, Library
from ..ir.program import Program
from .legality import why_not

UNROLLS = (1, 2, 4)
SPANS = (1, 2, 4)           # nested kernels: instances across the loop axis per block
PREFERRED_IPB = (8, 32)     # tried for unnested kernels when the variants allow them
MAX_ORDERS = 6


@dataclass(frozen=True)
class Fusion:
    calls: frozenset[int]

    def __str__(self) -> str:
        return "{" + ", ".join(f"c{i}" for i in sorted(self.calls)) + "}"


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

    def kernel_calls(self, program: Program) -> tuple[KernelCall, ...]:
        out = []
        chosen = dict(self.macros, BY=self.by)
        for i, vi in zip(self.order, self.variants):
            call = program.calls[i]
            var = call.function.variants[vi]
            macros = tuple((m, chosen[m] if chosen.get(m) in vals else vals[0])
                           for m, vals in var.macros.items())
            out.append(KernelCall(call, var, macros))
        return tuple(out)

    def spec(self, program: Program, name: str, stores: frozenset[int]) -> KernelSpec:
        return KernelSpec(name, self.kernel_calls(program), iters=0, ipb=self.ipb, stores=stores,
                          loop=self.loop, unroll=self.unroll, span=self.span)

    def describe(self, program: Program) -> str:
        kcs = self.kernel_calls(program)
        parts = [f"{kc.call.name}:{kc.variant.name}" for kc in kcs]
        extra = [f"loop {self.loop}", f"unroll {self.unroll}"] + ([f"span {self.span}"] if self.span > 1 else [])
        if self.by is not None:
            extra.insert(0, f"BY={self.by}")
        extra[1:1] = [f"{m}={v}" for m, v in self.macros]
        if kcs[0].call.function.nesting == 1:
            extra.append(f"{self.ipb}/block")
        return f"[{' '.join(parts)}] " + ", ".join(extra)


@dataclass
class Space:
    """Everything enumerated for one program: legal fusions, refusals, implementations."""
    program: Program
    graph: DependencyGraph
    fusions: list[Fusion] = field(default_factory=list)
    refused: dict[frozenset[int], str] = field(default_factory=dict)
    impls: dict[frozenset[int], list[tuple[Implementation, KernelCode]]] = field(default_factory=dict)
    pruned: dict[frozenset[int], dict[str, int]] = field(default_factory=dict)


def stores_of(program: Program, graph: DependencyGraph, calls: frozenset[int]) -> frozenset[int]:
    """Values a kernel running these calls must write: returned, or read by a call outside."""
    returned = {v.id for v in program.outputs}
    out = set()
    for i in calls:
        for v in program.calls[i].outputs:
            readers = [c for c in range(len(program.calls)) if (i, c) in graph.edge_values
                       and v in graph.edge_values[(i, c)]]
            if v.id in returned or any(c not in calls for c in readers):
                out.add(v.id)
    return frozenset(out)


def enumerate_fusions(program: Program, graph: DependencyGraph, max_size: int = 8) -> tuple[list[Fusion], dict]:
    """Legal fusions of two or more calls, and the reason each refused candidate was refused."""
    n = len(program.calls)
    legal, refused = [], {}
    for size in range(2, min(n, max_size) + 1):
        for combo in combinations(range(n), size):
            f = frozenset(combo)
            reason = why_not(program, graph, f)
            if reason:
                refused[f] = reason
            else:
                legal.append(Fusion(f))
    return legal, refused


def _orders(graph: DependencyGraph, calls: frozenset[int]) -> list[tuple[int, ...]]:
    """Topological orders of the calls (dependencies inside the fusion), at most MAX_ORDERS."""
    out: list[tuple[int, ...]] = []

    def rec(done: tuple[int, ...], left: frozenset[int]) -> None:
        if len(out) >= MAX_ORDERS:
            return
        if not left:
            out.append(done)
            return
        for c in sorted(left):
            if not (graph.preds[c] & left):
                rec(done + (c,), left - {c})

    rec((), calls)
    return out


def implementations(program: Program, graph: DependencyGraph, lib: Library, calls: frozenset[int],
                    spans: tuple[int, ...] = SPANS
                    ) -> tuple[list[tuple[Implementation, KernelCode]], dict[str, int]]:
    """Buildable implementations of a fusion (or of a single call), with pruning counts; a nested
    kernel's span is one of ``spans`` (instances across the loop axis per block)."""
    fns = [program.calls[i].function for i in sorted(calls)]
    nesting = fns[0].nesting
    stores = stores_of(program, graph, calls)
    pruned = {"refused by the builder": 0, "dominated in on-chip memory": 0}
    built: dict[tuple, tuple[Implementation, KernelCode]] = {}
    loops = AXES[nesting] if nesting == 2 else ("i",)
    spans = tuple(spans) if nesting == 2 else (1,)
    for order in _orders(graph, calls):
        var_choices = [range(len(program.calls[i].function.variants)) for i in order]
        for variants in product(*var_choices):
            vars_ = [program.calls[i].function.variants[v] for i, v in zip(order, variants)]
            bys = [set(v.macros["BY"]) for v in vars_ if "BY" in v.macros]
            by_choices = sorted(set.intersection(*bys)) if bys else [None]
            if bys and not by_choices:
                by_choices = sorted(set.union(*bys))
            others = sorted({m for v in vars_ for m in v.macros} - {"BY"})
            other_choices = [[(m, x) for x in sorted(set.intersection(*(set(v.macros[m]) for v in vars_
                                                                          if m in v.macros)))]
                             for m in others]
            ipbs = sorted(set.intersection(*(set(v.instances_per_block) for v in vars_)))
            ipb_choices = ([p for p in ipbs if p in PREFERRED_IPB] or ipbs[-1:]) if nesting == 1 else [1]
            copies = [(u, s) for u in UNROLLS for s in spans]     # (1, 1) first
            for by, loop, ipb, macros in product(by_choices, loops, ipb_choices, product(*other_choices)):
                base = Implementation(calls, order, tuple(variants), by, loop, 1, ipb, 1, macros)
                try:
                    codes = build_copies(base.spec(program, "k", stores), lib, copies)
                except FusionError:
                    pruned["refused by the builder"] += len(copies)
                    continue
                for (unroll, span), code in zip(copies, codes):
                    if isinstance(code, FusionError):
                        pruned["refused by the builder"] += 1
                        continue
                    impl = Implementation(calls, order, tuple(variants), by, loop, unroll, ipb, span, macros)
                    _keep(built, pruned, impl, code, order, variants)
    return list(built.values()), pruned


def _keep(built, pruned, impl: Implementation, code: KernelCode, order, variants) -> None:
    """Same choices in another call order: keep the one needing less shared memory."""
    key = (tuple(sorted(zip(order, variants))), impl.by, impl.macros, impl.loop, impl.unroll, impl.ipb,
           impl.span)
    old = built.get(key)
    if old is not None:
        pruned["dominated in on-chip memory"] += 1
        if old[1].launch.smem_bytes_per_real <= code.launch.smem_bytes_per_real:
            return
    built[key] = (impl, code)


def build_space(program: Program, lib: Library, spans: tuple[int, ...] = SPANS) -> Space:
    """Every legal fusion of ``program`` and the implementations of each (and of each single call),
    nested kernels with the spans ``spans``."""
    graph = DependencyGraph(program)
    space = Space(program, graph)
    space.fusions, space.refused = enumerate_fusions(program, graph)
    candidates = [frozenset({i}) for i in range(len(program.calls))] + [f.calls for f in space.fusions]
    for calls in candidates:
        impls, pruned = implementations(program, graph, lib, calls, spans)
        space.pruned[calls] = pruned
        if impls:
            space.impls[calls] = impls
        elif len(calls) > 1:
            space.refused[calls] = "no implementation can be built (resources or mappings)"
        else:
            raise FusionError(f"{program.calls[min(calls)].text()}: no implementation can be built")
    space.fusions = [f for f in space.fusions if f.calls in space.impls]
    return space
