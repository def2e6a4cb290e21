"""The horizontal pass: in the best partition, kernels whose calls exchange nothing, of one nesting
and instance space (``legality.why_not_horizontal``), share a kernel when the model predicts the
shared one faster than the two (a launch saved; nothing saved in transfers), pair by pair, most
saving first, up to HORIZONTAL_CALLS calls a kernel; candidates are kernels at most
HORIZONTAL_WINDOW apart in launch order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from ..ir.graph import DependencyGraph
from ..ir.program import Program
from ..library.schema import Library
from .legality import why_not_horizontal
from .partition import Partition, kernel_order
from .rank import Ranked, Ranker
from .reasons import Dependent, NoImplementation, Refusal, call_set
from .space import Space, implementations

HORIZONTAL_WINDOW = 4   # horizontal fusion: kernels at most this far apart in launch order are paired
HORIZONTAL_CALLS = 8    # ... into kernels of at most this many calls


MIN_SAVING = 0.05       # the least predicted saving (beyond a launch), as a share of the two kernels' time


@dataclass(frozen=True)
class NotFused:
    """Verdict: the two kernels may not share one (``reason``)."""
    reason: Dependent | Refusal | NoImplementation

    def __str__(self) -> str:
        return f"not fused: {self.reason}"


@dataclass(frozen=True)
class Merged:
    """Verdict: one kernel, predicted ``together`` seconds against ``apart`` for the two."""
    together: float
    apart: float

    def __str__(self) -> str:
        return f"one kernel, predicted {self.together * 1e6:.1f} us against {self.apart * 1e6:.1f} apart"


@dataclass(frozen=True)
class NoSaving:
    """Verdict: one kernel saves nothing beyond a launch (``together``, ``apart``: predicted seconds)."""
    together: float
    apart: float

    def __str__(self) -> str:
        return (f"not fused: predicted {self.together * 1e6:.1f} us as one kernel, {self.apart * 1e6:.1f} apart: "
                "no saving beyond a launch")


Verdict = Union[NotFused, Merged, NoSaving]


@dataclass(frozen=True)
class Tried:
    """A pair of kernels (their calls ``a``, ``b``) the pass tried, and its verdict."""
    a: frozenset[int]
    b: frozenset[int]
    verdict: Verdict

    def __str__(self) -> str:
        return f"{call_set(self.a)} + {call_set(self.b)}: {self.verdict}"


@dataclass(frozen=True)
class HorizontalInputs:
    """What the pass reads: the program, its space and the ranking of its blocks so far."""
    program: Program
    graph: DependencyGraph
    lib: Library
    space: Space
    spans: tuple[int, ...]
    ranker: Ranker
    ranked: Mapping[frozenset[int], Ranked]
    vector_on_strips: bool


@dataclass(frozen=True)
class Horizontal:
    """What the pass found: the merged partition (None: nothing merged), the kernels it ranked for
    the merges it tried (to add to the search's), and what it tried, for explain()."""
    partition: Partition | None
    ranked: Mapping[frozenset[int], Ranked]
    log: tuple[Tried, ...]


def horizontal_pass(inputs: HorizontalInputs, base: Partition) -> Horizontal:
    """Merge kernels of partition ``base`` (in launch order) pair by pair, the most saving first."""
    found: dict[frozenset[int], Ranked] = {}
    log: list[Tried] = []
    blocks = list(base)
    tried: set[frozenset[int]] = set()
    while True:
        best = None
        for n, a in enumerate(blocks):
            for b in blocks[n + 1:n + 1 + HORIZONTAL_WINDOW]:
                u = a | b
                if u in tried or len(u) > HORIZONTAL_CALLS:
                    continue
                tried.add(u)
                saving, verdict = _saving(inputs, found, a, b)
                log.append(Tried(a, b, verdict))
                if saving > 0 and (best is None or saving > best[0]):
                    merged = [x for x in blocks if x not in (a, b)] + [u]
                    order = kernel_order(inputs.graph, merged)
                    if order is not None:
                        best = (saving, order)
        if best is None:
            break
        blocks = best[1]
    return Horizontal(tuple(blocks) if set(blocks) != set(base) else None, found, tuple(log))


def _saving(inputs: HorizontalInputs, found: dict[frozenset[int], Ranked], a: frozenset[int],
            b: frozenset[int]) -> tuple[float, Verdict]:
    """(predicted seconds saved by running kernels a and b as one, the verdict); a merge
    ranked here is added to ``found``."""
    u = a | b

    def ranking(x: frozenset[int]) -> Ranked:
        return inputs.ranked[x] if x in inputs.ranked else found[x]

    if u not in inputs.ranked and u not in found:
        program, graph = inputs.program, inputs.graph
        reason = why_not_horizontal(program, graph, a, b, inputs.vector_on_strips)
        if reason:
            return 0.0, NotFused(reason)
        # the variants each kernel has now; every shared choice (block size, unroll, ...) tried
        chosen = {c: v for x in (a, b) for c, v in zip(ranking(x)[0][1].order, ranking(x)[0][1].variants)}
        impls, _ = implementations(program, graph, inputs.lib, u, inputs.spans, sampled=True,
                                   variants_of=lambda o: [tuple(chosen[c] for c in o)], shapes=inputs.space.shapes,
                                   memo=inputs.space.memo)
        if not impls:
            return 0.0, NotFused(NoImplementation.BUILT)
        ranked = inputs.ranker.rank(impls)
        if not ranked:      # built, but none fits these sizes (strips of rows too long)
            return 0.0, NotFused(NoImplementation.FITS)
        found[u] = ranked
    apart, together = ranking(a)[0][0] + ranking(b)[0][0], ranking(u)[0][0]
    # the launch saved is not counted: kernels queued back to back (graph replay, early launch)
    # hide it, and merged streams are no faster (docs/design.md, "Horizontal fusion")
    # and a saving within the model's noise (MIN_SAVING of the two) is none: it would merge kernels
    # on rounding, changing plans with every calibration
    saving = apart - together - inputs.ranker.model.launch_seconds
    if saving > MIN_SAVING * apart:
        return saving, Merged(together, apart)
    return 0.0, NoSaving(together, apart)
