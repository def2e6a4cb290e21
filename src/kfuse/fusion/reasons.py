"""Why a fusion is refused or does not fit, as values: the legality rules' reasons (``Refusal``:
a rule and its reason), the horizontal pass's ``Dependent``, the sizes' misfits (``legality.fits_at``)
and ``NoImplementation``.  Each carries the calls, values and sizes concerned; ``str()`` of a
reason is its sentence in ``explain()`` and the CLI."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Union

from ..ir.program import Call, Value


def call_set(calls) -> str:
    """Calls as the explanations name them: ``{c0, c2}``."""
    return "{" + ", ".join(f"c{i}" for i in sorted(calls)) + "}"


class NoImplementation(Enum):
    """A fusion with no implementation: none can be built, or none fits the sizes at hand."""
    BUILT = "no implementation can be built (resources or mappings)"
    FITS = "no implementation fits these sizes"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class NestingDiffers:
    """same_nesting: calls of different nesting depths (``deep``, ``flat``: one of each), not on
    strips: not asked for (``asked``), or ``lacking`` has no variant for its side of the strips."""
    depths: tuple[int, ...]
    deep: Call
    flat: Call
    asked: bool
    lacking: Call | None = None

    def __str__(self) -> str:
        if not self.asked or self.lacking is None:
            why = "a kernel walks one nesting; vector calls on the rows of strips: vector_on_strips=True"
        elif self.lacking.function.nesting == self.depths[0]:
            why = f"no variant of {self.lacking.function.name} runs on the rows of strips"
        else:
            why = f"no variant of {self.lacking.function.name} walks strips of whole rows"
        return (f"nesting depths {list(self.depths)} differ: {self.deep.text()} walks instances over "
                f"{self.depths[-1]} axes, {self.flat.text()} over {self.depths[0]} ({why})")


@dataclass(frozen=True)
class UnlinkedRows:
    """same_nesting: a vector call on the rows of strips sharing no value with the matrix calls."""
    call: Call

    def __str__(self) -> str:
        return (f"{self.call.text()} shares no value with the matrix calls on strips it would join "
                f"(a vector call runs on the strips' rows only to use or feed what they compute)")


@dataclass(frozen=True)
class OtherInstances:
    """same_instances: ``call`` walks other instances (``walks``) than ``first`` (``first_walks``)."""
    call: Call
    walks: str
    first: Call
    first_walks: str

    def __str__(self) -> str:
        return f"{self.call.text()} walks {self.walks} instances, {self.first.text()} walks {self.first_walks}"


@dataclass(frozen=True)
class OnTriangle:
    """same_instances: ``call`` walks only the tiles on and above the diagonal (its function's
    ``triangle``), so no other call's instances meet it in a block."""
    call: Call
    triangle: str

    def __str__(self) -> str:
        return (f"{self.call.text()} walks only the {self.triangle} triangle's tiles (those below the diagonal "
                "are never launched): it runs in a kernel alone")


@dataclass(frozen=True)
class ScalarBarrier:
    """exchanges_on_chip: ``cons`` takes ``value``, computed by ``prod``, as a scalar argument."""
    cons: Call
    prod: Call
    value: Value

    def __str__(self) -> str:
        return (f"{self.cons.text()} takes {self.value.name} as a scalar argument, which {self.prod.text()} "
                "computes from every instance: a global barrier")


@dataclass(frozen=True)
class IndexBarrier:
    """exchanges_on_chip: ``cons`` reads ``value`` along other axes (``read``) than ``prod`` makes it."""
    cons: Call
    prod: Call
    value: Value
    read: str
    made: str

    def __str__(self) -> str:
        return (f"{self.cons.text()} reads {self.value.name} along {self.read or '-'}, "
                f"{self.prod.text()} makes it along {self.made or '-'}: a global barrier")


@dataclass(frozen=True)
class GatherBarrier:
    """exchanges_on_chip: ``cons`` reads ``value`` beyond its instance's own element (``reach``:
    a stencil's neighbours, a sparse mat-vec's gather), which other blocks of the kernel make."""
    cons: Call
    prod: Call
    value: Value
    reach: str
    halo: str = ""      # why the value cannot be recomputed across a stencil's halo (ir/halo.py)

    def __str__(self) -> str:
        what = "the neighbours of each entry" if self.reach == "neighbours" else "entries anywhere"
        return (f"{self.cons.text()} reads {what} of {self.value.name}, which {self.prod.text()} makes: "
                "a global barrier (the value must be complete before its kernel starts)"
                + (f"; not recomputed across the halo: {self.halo}" if self.halo else ""))


@dataclass(frozen=True)
class ReductionBarrier:
    """exchanges_on_chip: ``cons`` uses the whole result of ``prod``'s reduction over ``axes``, and
    no variants of the two span those axes whole."""
    cons: Call
    prod: Call
    value: Value
    axes: tuple[str, ...]

    def __str__(self) -> str:
        return (f"{self.cons.text()} uses the reduction result {self.value.name} of {self.prod.text()}: a global "
                f"barrier (no variants of {self.prod.function.name} and {self.cons.function.name} span "
                f"{''.join(self.axes)} whole)")


@dataclass(frozen=True)
class PartialsOfMap:
    """exchanges_on_chip: ``cons`` takes partial sums as input ``param``, but ``value`` is a map result."""
    cons: Call
    param: str
    value: Value

    def __str__(self) -> str:
        return f"{self.cons.text()} takes partial sums as {self.param}, but {self.value.name} is a map result"


@dataclass(frozen=True)
class Cycle:
    """no_cycle_outside: ``call``, outside, depends on the fusion and the fusion on it."""
    call: Call

    def __str__(self) -> str:
        return f"{self.call.text()} depends on the fusion and the fusion depends on it"


@dataclass(frozen=True)
class NothingShared:
    """saves_traffic: ``call`` shares no data with the rest of the fusion."""
    call: Call

    def __str__(self) -> str:
        return f"{self.call.text()} shares no data with the rest of the fusion: nothing saved"


@dataclass(frozen=True)
class SharedMatrix:
    """one_call_per_matrix: ``first`` and ``second`` both read csr matrix ``matrix``."""
    first: Call
    second: Call
    matrix: Value

    def __str__(self) -> str:
        return (f"{self.first.text()} and {self.second.text()} both read csr matrix {self.matrix.name}: "
                "its long rows are summed before the kernel, for one call")


Reason = Union[NestingDiffers, UnlinkedRows, OtherInstances, OnTriangle, ScalarBarrier, IndexBarrier, ReductionBarrier,
               PartialsOfMap, Cycle, NothingShared, SharedMatrix]


@dataclass(frozen=True)
class Refusal:
    """A rule (``rule``: its name) refusing a fusion, and its reason: 'rule: reason' in words."""
    rule: str
    reason: Reason

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


@dataclass(frozen=True)
class Dependent:
    """Horizontal fusion: kernel ``second`` depends on kernel ``first``."""
    first: frozenset[int]
    second: frozenset[int]

    def __str__(self) -> str:
        return f"dependent: {call_set(self.second)} depends on {call_set(self.first)}"


@dataclass(frozen=True)
class Uncovered:
    """fits_at: the ``axis`` (i or j) of ``length`` is longer than a strip of ``extent`` x ``blocks``."""
    axis: str
    length: int
    extent: int
    blocks: int

    def __str__(self) -> str:
        what = "rows" if self.axis == "j" else "columns"
        return (f"{what} of {self.length} do not fit a strip of {self.extent} x {self.blocks} blocks "
                "(one cluster must cover them)" if self.blocks > 1 else
                f"{what} of {self.length} do not fit a strip of {self.extent} (one block must cover them)")


@dataclass(frozen=True)
class NarrowerStrip:
    """fits_at: the ``axis`` of ``length`` fits a narrower strip than ``extent`` (x ``blocks``)."""
    axis: str
    length: int
    extent: int
    blocks: int

    def __str__(self) -> str:
        what = "rows" if self.axis == "j" else "columns"
        return f"{what} of {self.length} fit a narrower strip than {self.extent}" + (
            f" x {self.blocks} blocks" if self.blocks > 1 else "")


@dataclass(frozen=True)
class SmallerCluster:
    """fits_at: the ``axis`` of ``length`` fits a cluster of ``blocks`` blocks of ``extent``, fewer."""
    axis: str
    length: int
    blocks: int
    extent: int

    def __str__(self) -> str:
        what = "rows" if self.axis == "j" else "columns"
        return f"{what} of {self.length} fit a cluster of {self.blocks} blocks of {self.extent}"


@dataclass(frozen=True)
class Spills:
    """fits_at: the strip's elements take ``words`` registers per thread, more than ``cap``."""
    words: int
    itemsize: int
    threads: int
    cap: int

    def __str__(self) -> str:
        return (f"its elements take {self.words} registers per thread at {self.itemsize * 8}-bit entries and "
                f"{self.threads} threads (at most {self.cap}: they would spill)")


Misfit = Union[Uncovered, NarrowerStrip, SmallerCluster, Spills]
