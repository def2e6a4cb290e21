"""Plans: which calls run in which kernel, in launch order, with every implementation choice.

A plan covers every call once with kernels (fusion implementations and single-call kernels) whose
dependency graph is acyclic.  ``PlanSearch`` ranks plans by a cost model (``cost/``: the calibrated
one when ``kfuse.compile`` finds a calibration, else the transfer model) and yields them best
first, then the next best, for empirical search.

``PlanSearch`` is a facade over the search's stages, each in its own module: the space
(``space.py``, data), the ranker (``rank.py``), the partitioners (``partition.py``: exhaustive,
greedy and refinement for bounded search), the horizontal pass (``horizontal.py``) and the
explainer (``explain.py``).  What stays here is the k-best enumeration of plans over the partitions.
"""
from __future__ import annotations

import heapq
from typing import Iterator

from ..cost.transfer import DEFAULT_MACHINE, Machine
from ..ir.graph import DependencyGraph
from ..ir.kernel import KernelCall, KernelSpec
from ..ir.plan import Plan
from ..ir.program import Program
from ..library.schema import Library, Variant
from ..passes import no_timer
from . import explain as explainer
from .horizontal import HorizontalInputs, Tried, horizontal_pass
from .partition import Partition, count_plans, exhaustive_partitions, greedy_partitions, ordered, refine_chosen
from .reasons import Misfit, NoImplementation
from .rank import Ranked, Ranker, entries_of, planning_dims, rank_space
from .shape import stores_of
from .space import SPANS, Space, build_space
from .ties import DEFAULT_BY

DEFAULT_IPB = 8         # preferred instances per block for unnested functions
DEFAULT_ITERS = 0       # serial iterations (0: chosen at launch from the sizes)


def default_macros(variant: Variant) -> tuple[tuple[str, int], ...]:
    out = []
    for name, values in variant.macros.items():
        pick = DEFAULT_BY if DEFAULT_BY in values else values[len(values) // 2]
        out.append((name, pick))
    return tuple(out)


def preferred_loop(fn) -> str:
    """Walk an axis that the reduced outputs leave out, so they accumulate across the loop."""
    for p in fn.outputs:
        if p.reduce:
            missing = [a for a in fn.axes if a not in p.index]
            if missing:
                return missing[0]
    return "i"


def unfused_plan(program: Program, lib: Library) -> Plan:
    """Every call its own kernel (the paper's "code without fusions"), in a dependency order."""
    graph = DependencyGraph(program)
    kernels = []
    for n, idx in enumerate(graph.topological_order()):
        call = program.calls[idx]
        variant = call.function.variants[0]
        ipb = 1
        if call.function.nesting == 1:
            allowed = variant.instances_per_block
            ipb = DEFAULT_IPB if DEFAULT_IPB in allowed else max(allowed)
        kernels.append(KernelSpec(f"k{n}_{call.function.name}",
                                  (KernelCall(call, variant, default_macros(variant)),),
                                  iters=DEFAULT_ITERS, ipb=ipb, loop=preferred_loop(call.function),
                                  stores=frozenset(v.id for v in call.outputs)))
    return Plan(program, tuple(kernels))



class PlanSearch:
    """All plans of a program, ranked by a model (default: the transfer model) at the given sizes.

    The constructor runs the stages (space, rank, partition, refine, horizontal) and keeps their
    results as attributes; the methods enumerate plans best first and explain the search."""

    def __init__(self, program: Program, lib: Library, sizes: dict[str, int] | None = None,
                 itemsize: int = 4, machine: Machine = DEFAULT_MACHINE, model=None, timer=no_timer,
                 spans: tuple[int, ...] = SPANS, horizontal: bool = True, clusters: bool = True,
                 vector_on_strips: bool = False):
        self.program, self.lib, self.machine = program, lib, machine
        self.clusters = clusters        # may kernels of thread-block clusters run (compute capability 9.0)?
        # may vector calls run on the rows of matrix calls' strips (one kernel: a gemv's result used
        # by a dot or an axpy)?  Off by default: docs/design.md, "Strips, clusters and bands"
        self.vector_on_strips = vector_on_strips
        # a cost.Model: the calibrated model or, by default, the transfer model
        self.model = model if model is not None else machine
        self.dims = planning_dims(program, sizes)
        with timer("space"):
            self.space: Space = build_space(program, lib, spans, on_strips_rows=vector_on_strips, dims=self.dims)
        self.spans = spans
        self.graph: DependencyGraph = self.space.graph
        self.entries = entries_of(program, self.dims)
        self.itemsize = itemsize
        self.ranker = Ranker(self.model, self.dims, self.entries, itemsize, clusters)
        self.ranked: dict[frozenset[int], Ranked]
        self.sized_out: dict[frozenset[int], Misfit | NoImplementation]     # fusions no implementation of fits these sizes
        with timer("rank"):
            self.ranked, self.sized_out = rank_space(self.space, self.ranker)
        with timer("search"):
            self.partitions: list[Partition] = (
                exhaustive_partitions(self.graph, self.ranked) if self.space.bounded is None
                else greedy_partitions(self.graph, len(program.calls), self.ranked))
        if self.space.bounded is not None:
            with timer("space"):
                self.ranked.update(refine_chosen(self.space, lib, self.partitions[0], self.ranker.score, spans,
                                                 self.ranker.rank))
        self.horizontal = horizontal
        self.horizontal_log: list[Tried] = []   # what the horizontal pass tried, for explain()
        if horizontal:
            with timer("horizontal"):
                self._horizontal()

    def _horizontal(self) -> None:
        """The horizontal pass (``horizontal.py``) over the best partition; the merged partition,
        if any, is added to the partitions (its plans ranked with the others)."""
        best = min(range(len(self.partitions)),
                   key=lambda i: (self._cost(self.partitions[i], (0,) * len(self.partitions[i])), i))
        found = horizontal_pass(HorizontalInputs(self.program, self.graph, self.lib, self.space, self.spans,
                                                 self.ranker, self.ranked, self.vector_on_strips),
                                tuple(ordered(self.graph, self.partitions[best])))
        self.ranked.update(found.ranked)
        self.horizontal_log = list(found.log)
        if found.partition is not None:
            self.partitions.append(found.partition)

    # -- counts ----------------------------------------------------------------------------
    def count_implementations(self) -> int:
        return explainer.count_implementations(self.ranked)

    def count_plans(self) -> int:
        return count_plans(self.partitions, self.ranked)

    # -- plans, best first -----------------------------------------------------------------------
    def plans(self) -> Iterator[Plan]:
        """Every plan in order of predicted time (k-best enumeration over each partition)."""
        heap: list[tuple[float, int, tuple[int, ...]]] = []
        seen: set[tuple[int, tuple[int, ...]]] = set()
        for pid, blocks in enumerate(self.partitions):
            idx = (0,) * len(blocks)
            heapq.heappush(heap, (self._cost(blocks, idx), pid, idx))
            seen.add((pid, idx))
        while heap:
            cost, pid, idx = heapq.heappop(heap)
            blocks = self.partitions[pid]
            yield self.plan(blocks, idx)
            for n in range(len(idx)):
                if idx[n] + 1 < len(self.ranked[blocks[n]]):
                    nxt = idx[:n] + (idx[n] + 1,) + idx[n + 1:]
                    if (pid, nxt) not in seen:
                        seen.add((pid, nxt))
                        heapq.heappush(heap, (self._cost(blocks, nxt), pid, nxt))

    def covering_plans(self) -> Iterator[tuple[int, Plan]]:
        """(partition index, plan) pairs that together use every implementation of every kernel of
        every partition: the m-th plan of a partition gives each block its m-th implementation
        (its last one when it has fewer)."""
        for pid, blocks in enumerate(self.partitions):
            for m in range(max(len(self.ranked[b]) for b in blocks)):
                idx = tuple(min(m, len(self.ranked[b]) - 1) for b in blocks)
                yield pid, self.plan(blocks, idx)

    def best(self) -> Plan:
        return next(self.plans())

    def _cost(self, blocks, idx) -> float:
        return sum(self.ranked[b][i][0] for b, i in zip(blocks, idx))

    def plan(self, blocks, idx) -> Plan:
        """The plan of partition ``blocks`` (one of ``partitions``) whose n-th kernel is the
        ``idx[n]``-th implementation of ``ranked[blocks[n]]`` (0: the best predicted)."""
        choice = dict(zip(blocks, idx))
        specs, parts, impls = [], [], []
        for n, b in enumerate(ordered(self.graph, blocks)):
            t, impl, code = self.ranked[b][choice[b]]
            names = "_".join(self.program.calls[i].function.name for i in impl.order)
            specs.append(impl.spec(self.program, f"k{n}_{names}", stores_of(self.program, self.graph, b)))
            parts.append(t)
            impls.append(impl)
        return Plan(self.program, tuple(specs), sum(parts), tuple(parts), tuple(impls))

    # -- explanation -------------------------------------------------------------------------------
    def findings(self) -> explainer.Findings:
        return explainer.Findings(self.program, self.graph, self.space, self.ranker, self.ranked, self.sized_out,
                                  self.partitions, self.horizontal_log)

    def one_pass(self, calls: frozenset[int]) -> str | None:
        """``explain.one_pass``: why a fusion using a reduction's result may run in one pass, or not."""
        return explainer.one_pass(self.findings(), calls)

    def explain(self) -> str:
        return explainer.explain(self.findings())
