"""The ranker: each fusion's implementations that fit the sizes at hand, best predicted first, by a
cost model (``cost/``: the calibrated one, else the transfer model) with measured tie-breaks
(``ties.py``).  Also the sizes a search plans for (``planning_dims``)."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..codegen.kernel import KernelCode
from ..cost.calibrated import resident_fraction
from ..cost.transfer import H100_FACTS
from ..ir.kernel import target_blocks
from ..ir.program import Program
from .legality import fits_at, stalls_streams, without_fallbacks, without_serial_sections
from .reasons import Misfit, NarrowerStrip, NoImplementation, Spills
from .space import Implementation, Space
from .ties import preference, sorted_lazily

DEFAULT_SIZE = 8192     # size the model assumes for a matrix dimension the caller does not give
DEFAULT_VECTOR_SIZE = 2**24   # ... and for a dimension only vectors have

Ranked = list[tuple[float, Implementation, KernelCode]]     # (predicted seconds, implementation, kernel)


def planning_dims(program: Program, sizes: Mapping[str, int] | None) -> dict[int, int]:
    """Dimension id -> the size planned for: the caller's, the script's literal, else a default."""
    sizes = sizes or {}
    matrix_dims = {d for v in program.values if v.type == "matrix" for d in v.dims}
    return {d.id: sizes.get(d.name, d.literal or (DEFAULT_SIZE if d.id in matrix_dims else DEFAULT_VECTOR_SIZE))
            for d in program.dims}


class Ranker:
    """Scores and ranks kernels for one program at fixed sizes (``dims``, ``entries``, ``itemsize``)
    by ``model``; ``clusters``: may thread-block clusters run.  Scores are memoised per kernel."""

    def __init__(self, model, dims: dict[int, int], entries: dict[int, int], itemsize: int,
                 clusters: bool = True):
        self.model, self.dims, self.entries, self.itemsize, self.clusters = model, dims, entries, itemsize, clusters
        self._scores: dict[int, tuple[float, KernelCode]] = {}   # id(code) -> (score, code)
        # rank's answer by the identity of the kernels ranked: (the kernels, kept alive so that their
        # ids are not reused; each ranked entry's score and position in the list ranked)
        self._ranks: dict[tuple[int, ...], tuple[tuple[KernelCode, ...], list[tuple[float, int]]]] = {}

    def score(self, code: KernelCode) -> float:
        """Predicted seconds, kept to 0.1 us: closer predictions are ties, broken by measured
        preferences (``rank``).  Fusions of one shape share their kernels' layouts (fusion/space.py
        ``fusion_shape``), so each is scored once."""
        got = self._scores.get(id(code))
        if got is None:         # the code is kept with its score: its id is not reused meanwhile
            t = round(self.model.kernel_time(code, self.dims, self.entries, self.itemsize) * 1e7) / 1e7
            got = self._scores[id(code)] = (t, code)
        return got[0]

    def fits(self, code: KernelCode) -> Misfit | None:
        """Why the kernel cannot run at these sizes (``legality.fits_at``); None when it can."""
        return fits_at(code, self.dims, self.itemsize)

    def misfit(self, impls: Iterable[tuple[Implementation, KernelCode]]) -> Misfit | NoImplementation:
        """Why no implementation of a fusion fits the sizes at hand (the widest strip's reason)."""
        reasons = [(code, self.fits(code)) for _, code in impls]
        real = [(code, r) for code, r in reasons if r is not None and not isinstance(r, NarrowerStrip)]
        regs = [(code.launch.strip_registers(self.itemsize), r) for code, r in real if isinstance(r, Spills)]
        if regs:        # some strip covers the rows, but none fits the registers: the fewest
            return min(regs, key=lambda wr: wr[0])[1]
        return (max(real, key=lambda cr: max(cr[0].launch.axis_extent) * cr[0].launch.cluster)[1] if real
                else NoImplementation.FITS)

    def rank(self, impls: list[tuple[Implementation, KernelCode]]) -> Ranked:
        """Implementations that fit the sizes at hand (``legality.fits_at``), best predicted first.

        Fusions of one shape share their kernels (fusion/space.py ``fusion_shape``) and their
        implementations differ only in the calls named, mapped in increasing order: everything the
        ranking reads (the kernels, the implementations' choices, their call orders compared
        lexicographically) orders them alike, so it is found once per list of kernels."""
        codes = tuple(code for _, code in impls)
        key = tuple(map(id, codes))
        got = self._ranks.get(key)
        if got is None:
            ranked = self._rank(impls)
            position = {id(impl): n for n, (impl, _) in enumerate(impls)}
            if len(position) < len(impls):
                return ranked           # an implementation listed twice: not kept
            got = self._ranks[key] = (codes, [(t, position[id(impl)]) for t, impl, _ in ranked])
        return [(t, impls[n][0], impls[n][1]) for t, n in got[1]]

    def _rank(self, impls: list[tuple[Implementation, KernelCode]]) -> Ranked:
        """``rank``, found."""
        fitting = without_fallbacks([(impl, code) for impl, code in impls if self.fits(code) is None], impls)
        fitting = without_serial_sections(fitting, self.fills_gpu)
        if not self.clusters or any(code.launch.cluster == 1 for _, code in fitting):
            # a cluster's barriers and its reads of other blocks' shared memory cost more than a
            # block's, and the calibration does not measure them: clusters only where nothing
            # without one fits (rows longer than a block holds), on a GPU that has them
            fitting = [(impl, code) for impl, code in fitting if code.launch.cluster == 1]
        scored = [(self.score(code), impl, code) for impl, code in fitting]
        return sorted_lazily(scored, [lambda t: t[0], lambda t: t[1].unroll > self.iterations(t[2]),
                                       lambda t: preference(t[1], t[2], self.itemsize)])

    def iterations(self, code: KernelCode) -> int:
        """Serial iterations of a kernel at these sizes, as chosen at launch on the model's GPU
        (H100 facts for the transfer model).  An unroll beyond them buys nothing and costs
        registers (docs/design.md, 'Unrolling'), so ties prefer an unroll that fits."""
        dev = self.device()
        L = code.launch
        return L.iterations(self.dims, target_blocks(dev["sms"], dev["max_threads_per_sm"], L.threads))

    def device(self) -> dict:
        """The multiprocessor facts of the GPU the plan is for, as the model has them (this GPU's:
        ``calibrated.on_this_gpu``, ``transfer_on_this_gpu``); H100 facts for a model without."""
        return getattr(self.model, "device", None) or H100_FACTS

    def fills_gpu(self, code: KernelCode) -> bool:
        return self.waves(code) > 1

    def stalls(self, codes: list[KernelCode]) -> int:
        """How many of a fusion's kernels ``legality.without_serial_sections`` would leave out."""
        return sum(stalls_streams(code, self.fills_gpu) for code in codes)

    def waves(self, code: KernelCode) -> float:
        """A kernel's grid over the blocks its GPU runs at once (by threads and shared memory)."""
        dev = self.device()
        L = code.launch
        resident = resident_fraction(dev, L.threads, L.smem_bytes_per_real * self.itemsize)
        return L.grid(self.dims, self.iterations(code)) / (resident * dev["max_threads_per_sm"] / L.threads * dev["sms"])


def rank_space(space: Space, ranker: Ranker
               ) -> tuple[dict[frozenset[int], Ranked], dict[frozenset[int], Misfit | NoImplementation]]:
    """(fusion -> its ranked implementations, fusion -> why none of its implementations fits these
    sizes) over the space's fusions and single calls."""
    ranked: dict[frozenset[int], Ranked] = {}
    sized_out: dict[frozenset[int], Misfit | NoImplementation] = {}
    for calls, impls in space.impls.items():
        found = ranker.rank(impls)
        if found:
            ranked[calls] = found
        else:
            sized_out[calls] = ranker.misfit(impls)
    return ranked, sized_out
