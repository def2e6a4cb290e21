"""Plans: which calls run in which kernel, in launch order, with every implementation choice.

A plan covers every call once with kernels (fusion implementations and single-call kernels) whose
dependency graph is acyclic.  ``PlanSearch`` ranks plans by a cost model (``cost/``: the calibrated
one when ``kfuse.compile`` finds a calibration, else the transfer model) and yields them best
first, then the next best, for empirical search.
"""
from __future__ import annotations

import heapq
from typing import Iterable, Iterator

from ..codegen.kernel import KernelCode
from ..cost.calibrated import resident_fraction
from ..cost.transfer import DEFAULT_MACHINE, H100_FACTS, Machine
from ..ir.graph import DependencyGraph
from ..ir.kernel import KernelCall, KernelSpec, target_blocks
from ..ir.plan import Plan
from ..ir.program import Program
from ..library.schema import Library, Variant
from ..passes import no_timer
from .blocks import BlockGraph
from .legality import (call_set, fallback_lines, fits_at, one_pass_exchanges, why_not_horizontal,
                       stalls_streams, without_fallbacks, without_serial_sections)
from .ties import DEFAULT_BY, preference, sorted_lazily
from .space import REFINE_BUILDS, REFINE_TOTAL, SPANS, Implementation, Space, build_space, implementations, refine, stores_of

DEFAULT_IPB = 8         # preferred instances per block for unnested functions
DEFAULT_ITERS = 0       # serial iterations (0: chosen at launch from the sizes)
DEFAULT_SIZE = 8192     # size the model assumes for a matrix dimension the caller does not give
DEFAULT_VECTOR_SIZE = 2**24   # ... and for a dimension only vectors have
HORIZONTAL_WINDOW = 4   # horizontal fusion: kernels at most this far apart in launch order are paired
HORIZONTAL_CALLS = 8    # ... into kernels of at most this many calls




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
    """All plans of a program, ranked by a model (default: the transfer model) at the given sizes."""

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
        sizes = sizes or {}
        matrix_dims = {d for v in program.values if v.type == "matrix" for d in v.dims}
        self.dims = {d.id: sizes.get(d.name, d.literal or (DEFAULT_SIZE if d.id in matrix_dims
                                                           else DEFAULT_VECTOR_SIZE))
                     for d in program.dims}
        with timer("space"):
            self.space: Space = build_space(program, lib, spans, on_strips_rows=vector_on_strips, dims=self.dims)
        self.spans = spans
        self.graph = self.space.graph
        self.entries = {}
        for v in program.values:
            n = 1
            for d in v.dims:
                n *= self.dims[d]
            self.entries[v.id] = n
        self.ranked: dict[frozenset[int], list[tuple[float, Implementation, KernelCode]]] = {}
        self._scores: dict[int, tuple[float, KernelCode]] = {}   # id(code) -> (score, code)
        self.itemsize = itemsize
        self.sized_out: dict[frozenset[int], str] = {}     # fusions no implementation of fits these sizes
        with timer("rank"):
            for calls, impls in self.space.impls.items():
                ranked = self._rank(impls)
                if ranked:
                    self.ranked[calls] = ranked
                else:
                    self.sized_out[calls] = self._misfit(impls)
        with timer("search"):
            self.partitions = self._partitions() if self.space.bounded is None else self._greedy_partitions()
        if self.space.bounded is not None:
            with timer("space"):
                self._refine()
        self.horizontal = horizontal
        self.horizontal_log: list[str] = []     # what the horizontal pass tried, for explain()
        if horizontal:
            with timer("horizontal"):
                self._horizontal()

    # -- partitions --------------------------------------------------------------------------
    def _partitions(self) -> list[tuple[frozenset[int], ...]]:
        order = self.graph.topological_order()
        out: list[tuple[frozenset[int], ...]] = []

        def rec(k: int, blocks: list[frozenset[int]]) -> None:
            if k == len(order):
                if self._acyclic(blocks):
                    out.append(tuple(blocks))
                return
            c = order[k]
            for n, b in enumerate(blocks):
                joined = b | {c}
                if joined in self.ranked:
                    rec(k + 1, blocks[:n] + [joined] + blocks[n + 1:])
            rec(k + 1, blocks + [frozenset({c})])

        rec(0, [])
        return out

    def _score(self, code: KernelCode) -> float:
        """Predicted seconds, kept to 0.1 us: closer predictions are ties, broken by measured
        preferences (``_rank``).  Fusions of one shape share their kernels' layouts (fusion/space.py
        ``fusion_shape``), so each is scored once."""
        got = self._scores.get(id(code))
        if got is None:         # the code is kept with its score: its id is not reused meanwhile
            t = round(self.model.kernel_time(code, self.dims, self.entries, self.itemsize) * 1e7) / 1e7
            got = self._scores[id(code)] = (t, code)
        return got[0]

    def _fits(self, code: KernelCode) -> str | None:
        return fits_at(code, self.dims, self.itemsize)

    def _misfit(self, impls) -> str:
        """Why no implementation of a fusion fits the sizes at hand (the widest strip's reason)."""
        reasons = [(code, self._fits(code)) for _, code in impls]
        real = [(code, r) for code, r in reasons if r and "narrower" not in r]
        regs = [(code.launch.strip_registers(self.itemsize), r) for code, r in real if "registers" in r]
        if regs:        # some strip covers the rows, but none fits the registers: the fewest
            return min(regs, key=lambda wr: wr[0])[1]
        return (max(real, key=lambda cr: max(cr[0].launch.axis_extent) * cr[0].launch.cluster)[1] if real
                else "no implementation fits these sizes")

    def one_pass(self, calls: frozenset[int]) -> str | None:
        """For a fusion that uses a reduction's result in the kernel that computes it: why it may
        (the reduction completes within a block at these sizes) or why not; None otherwise."""
        ex = one_pass_exchanges(self.program, self.graph, calls)
        if not ex:
            return None
        p, c, v, axes = ex[0]
        what = f"the reduction over {''.join(axes)} of c{p} ({self.program.calls[p].text()})"
        if calls not in self.ranked:
            reason = self.sized_out.get(calls, "no implementation can be built (resources or mappings)")
            return f"two passes at these sizes: {what} cannot complete within a block or a cluster: {reason}"
        code = self.ranked[calls][0][2]
        L = code.launch
        n = next(k for k, a in enumerate(("i", "j")) if a in axes)
        length = self.dims[L.axis_dims[n]]
        where = (f"a cluster of {L.cluster} blocks of {L.threads} threads" if L.cluster > 1
                 else f"a block of {L.threads} threads")
        return (f"one pass: {what} completes within {where} "
                f"({'rows' if axes == ('j',) else 'columns'} of {length} fit a strip of "
                f"{L.axis_extent[0]} x {L.axis_extent[1]}" + (f" per block, {L.cluster} blocks" if L.cluster > 1 else "")
                + f"); {v.name} never leaves the chip")

    def _rank(self, impls) -> list[tuple[float, Implementation, KernelCode]]:
        """Implementations that fit the sizes at hand (``legality.fits_at``), best predicted first."""
        fitting = without_fallbacks([(impl, code) for impl, code in impls if self._fits(code) is None], impls)
        fitting = without_serial_sections(fitting, self._fills_gpu)
        if not self.clusters or any(code.launch.cluster == 1 for _, code in fitting):
            # a cluster's barriers and its reads of other blocks' shared memory cost more than a
            # block's, and the calibration does not measure them: clusters only where nothing
            # without one fits (rows longer than a block holds), on a GPU that has them
            fitting = [(impl, code) for impl, code in fitting if code.launch.cluster == 1]
        scored = [(self._score(code), impl, code) for impl, code in fitting]
        return sorted_lazily(scored, [lambda t: t[0], lambda t: t[1].unroll > self._iterations(t[2]),
                                       lambda t: preference(t[1], t[2], self.itemsize)])

    def _iterations(self, code: KernelCode) -> int:
        """Serial iterations of a kernel at the search's sizes, as chosen at launch on the model's
        GPU (H100 facts for the transfer model).  An unroll beyond them buys nothing and costs
        registers (docs/design.md, 'Unrolling'), so ties prefer an unroll that fits."""
        dev = self._device()
        L = code.launch
        return L.iterations(self.dims, target_blocks(dev["sms"], dev["max_threads_per_sm"], L.threads))

    def _device(self) -> dict:
        """The multiprocessor facts of the GPU the plan is for, as the model has them (this GPU's:
        ``calibrated.on_this_gpu``, ``transfer_on_this_gpu``); H100 facts for a model without."""
        return getattr(self.model, "device", None) or H100_FACTS

    def _fills_gpu(self, code: KernelCode) -> bool:
        return self._waves(code) > 1

    def _stalls(self, codes: list[KernelCode]) -> int:
        """How many of a fusion's kernels ``legality.without_serial_sections`` would leave out."""
        return sum(stalls_streams(code, self._fills_gpu) for code in codes)

    def _waves(self, code: KernelCode) -> float:
        """A kernel's grid over the blocks its GPU runs at once (by threads and shared memory)."""
        dev = self._device()
        L = code.launch
        resident = resident_fraction(dev, L.threads, L.smem_bytes_per_real * self.itemsize)
        return L.grid(self.dims, self._iterations(code)) / (resident * dev["max_threads_per_sm"] / L.threads * dev["sms"])

    def _refine(self) -> None:
        """Bounded search: the chosen partition's fused kernels searched further (fusion/space.py
        ``refine``) and ranked again."""
        fused = [calls for calls in self.partitions[0] if len(calls) > 1]
        limit = min(REFINE_BUILDS, REFINE_TOTAL // max(1, len(fused)))
        for calls in fused:
            refine(self.space, self.lib, calls, self._score, self.spans, limit)
            self.ranked[calls] = self._rank(self.space.impls[calls])

    def _horizontal(self) -> None:
        """Horizontal fusion: in the best partition, kernels whose calls exchange nothing, of one
        nesting and instance space (``legality.why_not_horizontal``), share a kernel when the model
        predicts the shared one faster than the two (a launch saved; nothing saved in transfers),
        pair by pair, most saving first, up to HORIZONTAL_CALLS calls a kernel; candidates are
        kernels at most HORIZONTAL_WINDOW apart in launch order.  The merged partition is added
        to the partitions (its plans ranked with the others)."""
        base = self.partitions[min(range(len(self.partitions)),
                                   key=lambda i: (self._cost(self.partitions[i], (0,) * len(self.partitions[i])), i))]
        blocks = self._ordered(base)
        tried: set[frozenset[int]] = set()
        while True:
            best = None
            for n, a in enumerate(blocks):
                for b in blocks[n + 1:n + 1 + HORIZONTAL_WINDOW]:
                    u = a | b
                    if u in tried or len(u) > HORIZONTAL_CALLS:
                        continue
                    tried.add(u)
                    saving, verdict = self._horizontal_saving(a, b)
                    self.horizontal_log.append(f"{call_set(a)} + {call_set(b)}: {verdict}")
                    if saving > 0 and (best is None or saving > best[0]):
                        merged = [x for x in blocks if x not in (a, b)] + [u]
                        order = self._kernel_order(merged)
                        if order is not None:
                            best = (saving, order)
            if best is None:
                break
            blocks = best[1]
        if set(blocks) != set(base):
            self.partitions.append(tuple(blocks))

    def _horizontal_saving(self, a: frozenset[int], b: frozenset[int]) -> tuple[float, str]:
        """(predicted seconds saved by running kernels a and b as one, the verdict in words)."""
        u = a | b
        if u not in self.ranked:
            reason = why_not_horizontal(self.program, self.graph, a, b, self.vector_on_strips)
            if reason:
                return 0.0, "not fused: " + reason
            # the variants each kernel has now; every shared choice (block size, unroll, ...) tried
            chosen = {c: v for x in (a, b) for c, v in zip(self.ranked[x][0][1].order, self.ranked[x][0][1].variants)}
            impls, _ = implementations(self.program, self.graph, self.lib, u, self.spans, sampled=True,
                                       variants_of=lambda o: [tuple(chosen[c] for c in o)], shapes=self.space.shapes,
                                       memo=self.space.memo)
            if not impls:
                return 0.0, "not fused: no implementation can be built (resources or mappings)"
            ranked = self._rank(impls)
            if not ranked:      # built, but none fits these sizes (strips of rows too long)
                return 0.0, "not fused: no implementation fits these sizes"
            self.ranked[u] = ranked
        apart, together = self.ranked[a][0][0] + self.ranked[b][0][0], self.ranked[u][0][0]
        # the launch saved is not counted: kernels queued back to back (graph replay, early launch)
        # hide it, and merged streams are no faster (docs/design.md, "Horizontal fusion")
        saving = apart - together - self.model.launch_seconds
        if saving > 0:
            return saving, f"one kernel, predicted {together * 1e6:.1f} us against {apart * 1e6:.1f} apart"
        return 0.0, (f"not fused: predicted {together * 1e6:.1f} us as one kernel, {apart * 1e6:.1f} apart: "
                     "no saving beyond a launch")

    def _greedy_partitions(self) -> list[tuple[frozenset[int], ...]]:
        """Bounded search: from one kernel per call, repeatedly merge the blocks of the fusion that
        saves the most predicted time (a fusion made of whole blocks, keeping the kernel graph
        acyclic), until none saves; that partition, and one kernel per call.

        The options are kept in a heap keyed by (-saving, calls) and offered again only when a
        merge changes the blocks of one of their calls (a fusion's saving depends on nothing else),
        so each merge costs the fusions it touches, not all of them; whether a merge keeps the
        kernel graph acyclic is checked on the blocks between the merged ones (``BlockGraph``).
        An option refused for a cycle is dropped until its blocks change: merging other blocks
        keeps every path, so it stays refused.  The merges are those of scanning every option
        each round, best first (the search before issue 44, finding 5)."""
        n = len(self.program.calls)
        best = {c: r[0][0] for c, r in self.ranked.items()}
        where = {i: frozenset({i}) for i in range(n)}
        fusions = [c for c in self.ranked if len(c) > 1]
        touching: dict[int, list[frozenset[int]]] = {}       # call -> the fusions holding it
        for c in fusions:
            for i in c:
                touching.setdefault(i, []).append(c)
        dag = BlockGraph(self.graph)
        heap: list[tuple[float, list[int], int]] = []
        current: dict[frozenset[int], tuple[float, list[int]]] = {}     # fusion -> its live key
        number = {c: k for k, c in enumerate(fusions)}

        def offer(c: frozenset[int]) -> None:
            current.pop(c, None)
            parts = {where[i] for i in c}
            if len(parts) < 2 or any(not b <= c for b in parts):
                return
            saving = sum(best[b] for b in parts) - best[c]
            if saving > 0:
                key = (-saving, sorted(c))
                current[c] = key
                heapq.heappush(heap, (key[0], key[1], number[c]))

        for c in fusions:
            offer(c)
        while heap:
            neg, calls, k = heapq.heappop(heap)
            c = fusions[k]
            if current.get(c) != (neg, calls):
                continue            # stale: its blocks changed since
            del current[c]
            if dag.merge(c) is None:
                continue            # a cycle: refused while its blocks stay as they are
            for i in c:
                where[i] = c
            for f in dict.fromkeys(f for i in c for f in touching[i]):
                offer(f)
        order = self.graph.topological_order()
        singles = tuple(frozenset({i}) for i in order)
        chosen = tuple(self._ordered(set(where.values())))
        return [chosen] + ([singles] if set(chosen) != set(singles) else [])

    def _acyclic(self, blocks: list[frozenset[int]]) -> bool:
        return self._kernel_order(blocks) is not None

    def _ordered(self, blocks: Iterable[frozenset[int]]) -> list[frozenset[int]]:
        """``_kernel_order`` of blocks known to form an acyclic partition."""
        order = self._kernel_order(list(blocks))
        assert order is not None, "a partition of the plan space is acyclic"
        return order

    def _kernel_order(self, blocks) -> list[frozenset[int]] | None:
        """The blocks (a partition of the calls) in launch order: a topological order of the
        kernel graph, the ready kernel with the smallest call first; None when it has a cycle.
        Linear in the calls and edges (but for the heap of ready kernels)."""
        where = {c: n for n, b in enumerate(blocks) for c in b}
        succ: list[set[int]] = [set() for _ in blocks]
        succs = self.graph.succs
        for p, n in where.items():
            for c in succs[p]:
                m = where[c]
                if m != n:
                    succ[n].add(m)
        indeg = [0] * len(blocks)
        for targets in succ:
            for m in targets:
                indeg[m] += 1
        ready = [(min(blocks[n]), n) for n in range(len(blocks)) if indeg[n] == 0]
        heapq.heapify(ready)
        result = []
        while ready:
            _, n = heapq.heappop(ready)
            result.append(blocks[n])
            for m in succ[n]:
                indeg[m] -= 1
                if indeg[m] == 0:
                    heapq.heappush(ready, (min(blocks[m]), m))
        return result if len(result) == len(blocks) else None

    # -- counts ----------------------------------------------------------------------------
    def count_implementations(self) -> int:
        return sum(len(v) for k, v in self.ranked.items() if len(k) > 1)

    def count_plans(self) -> int:
        total = 0
        for blocks in self.partitions:
            n = 1
            for b in blocks:
                n *= len(self.ranked[b])
            total += n
        return total

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
        for n, b in enumerate(self._ordered(blocks)):
            t, impl, code = self.ranked[b][choice[b]]
            names = "_".join(self.program.calls[i].function.name for i in impl.order)
            specs.append(impl.spec(self.program, f"k{n}_{names}", stores_of(self.program, self.graph, b)))
            parts.append(t)
            impls.append(impl)
        return Plan(self.program, tuple(specs), sum(parts), tuple(parts), tuple(impls))

    # -- explanation -------------------------------------------------------------------------------
    def explain(self) -> str:
        lines = self._explain_lines()
        if self.space.bounded:
            lines.insert(1, "search: " + self.space.bounded)
        if self.horizontal_log:
            lines.append("horizontal fusion (independent kernels of the best partition):")
            lines.extend(f"  {h}" for h in self.horizontal_log)
        return "\n".join(lines)

    def _explain_lines(self) -> list[str]:
        lines = [f"{len(self.space.fusions)} legal fusion(s), {self.count_implementations()} fusion "
                 f"implementation(s), {len(self.partitions)} partition(s), {self.count_plans()} plan(s)"]
        for f in self.space.fusions:
            if f.calls not in self.ranked:     # legal, but no implementation fits these sizes
                lines.append(f"  fusion {f}: " + "; ".join(self.program.calls[i].text() for i in sorted(f.calls)))
                lines.append(f"    {self.one_pass(f.calls) or self.sized_out.get(f.calls, '')}")
                continue
            impls = self.ranked[f.calls]
            pr = self.space.pruned.get(f.calls, {})
            pr_text = ", ".join(f"{v} {k}" for k, v in pr.items() if v)
            stalls = self._stalls([code for _, code in self.space.impls.get(f.calls, ()) if self._fits(code) is None])
            if stalls and not self._stalls([code for _, _, code in impls]):
                pr_text += (", " if pr_text else "") + (f"{stalls} with a serial section in the loop beside "
                                                        "other calls, on a full GPU (left out)")
            lines.append(f"  fusion {f}: " + "; ".join(self.program.calls[i].text() for i in sorted(f.calls)))
            why = self.one_pass(f.calls)
            if why:
                lines.append(f"    {why}")
            lines.append(f"    {len(impls)} implementation(s)" + (f" (pruned: {pr_text})" if pr_text else "")
                         + f"; best predicted {impls[0][0] * 1e6:.1f} us: {impls[0][1].describe(self.program)}")
        lines += fallback_lines(self.ranked, self.space.impls, self._misfit)
        if self.space.refused:
            lines.append("refused:")
            for calls, reason in sorted(self.space.refused.items(), key=lambda kv: (len(kv[0]), sorted(kv[0]))):
                names = call_set(calls)
                lines.append(f"  {names}: {reason}")
        return lines
