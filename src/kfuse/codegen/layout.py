"""One kernel laid out on chip: schedule, element placement, barriers, frame -- no text.

The analysis follows the paper's Algorithms 1 and 2.  The calls' routines are scheduled into
three phases (``pre``: invariant loads and clears of accumulated outputs before the serial loop,
``loop``: loads, computes and stores of each instance along the loop axis, ``post``: stores of
accumulated outputs); each on-chip element is placed in registers when every access has the same
thread-to-data mapping, else in shared memory; a routine call is preceded by a local barrier
exactly when a shared element it accesses was accessed since the last barrier by another routine
with a different mapping (one access being a write) -- the paper's two conditions, with the
loop's back edge taken into account.

The frame (threads, shared memory, arguments) is found in ``frame.py``.  The result, a
``Layout``, is frozen: emission (``emit.py``) and the cost models only read it.
An (unroll, span) copy of a kernel shares the analysis of the single one (``copy_layouts``; the
checks of the copies are in ``copies.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import FusionError
from ..ir.kernel import KernelCall, KernelSpec
from ..ir.record import quick_init
from ..library.mappings import MAPPINGS
from ..library.schema import AXES, Library
from .copies import (MAX_REGISTER_SLOTS, check_copies_in_registers, check_register_entries, check_register_slots,
                     check_span, copy_sets, slot_sums, span_slots, step_per_slot)
from .frame import MAX_SHARED_BYTES, Frame, frame_of
from .schedule import Access, Element, Placement, ScheduleMemo, Scheduler, Step, mapping_slots



__all__ = ["Access", "Element", "Frame", "Layout", "MAX_REGISTER_SLOTS", "MAX_SHARED_BYTES", "Placement", "Step",
           "REFUSED", "analyse", "copy_layouts", "finish", "layout"]


def replace(obj, **changes):
    """``dataclasses.replace`` for frozen records of plain fields, nothing derived or cached
    (Step, Layout, KernelSpec, LaunchInfo, fusion.space.Implementation), without the
    constructor's cost: planning a long script makes tens of thousands of such copies."""
    new = object.__new__(type(obj))
    fields = obj.__dict__.copy()
    fields.update(changes)
    object.__setattr__(new, "__dict__", fields)     # one dict made, not an empty one filled
    return new


@quick_init
@dataclass(frozen=True)
class Layout:
    """A kernel laid out: its elements, steps (barriers and spans marked) and placement; ``frame``
    and the copy sets are filled in by ``finish`` (None / empty in the analysis it starts from)."""
    spec: KernelSpec
    lib: Library = field(repr=False, compare=False)
    tile: tuple[int, int] | None                # nested kernels: the instances' tile
    elements: Mapping[str, Element]
    steps: tuple[Step, ...]
    placement: Placement
    frame: Frame | None = None
    outside: frozenset[str] = frozenset()       # elements used outside the serial loop
    per_slot: frozenset[str] = frozenset()      # elements with one copy per span slot


# ----------------------------------------------------------------------------------------
def layout(spec: KernelSpec, lib: Library) -> Layout:
    """Lay out one kernel (raises FusionError when the choices cannot be realised)."""
    return finish(analyse(spec, lib))


def analyse(spec: KernelSpec, lib: Library, memo: ScheduleMemo | None = None) -> Layout:
    """Schedule, placement and barriers: what no (unroll, span) copy changes.  A ``memo`` (of
    this program's kernels) answers a spec analysed before, but for its instances per block
    and iterations (which only ``check_spec`` reads), and schedules from the longest prefix of
    the calls scheduled before."""
    tile = check_spec(spec, lib, memo)
    if memo is None:
        return _analyse(spec, lib, tile, None)
    key = memo.analysis_key(spec)
    got = memo.layouts.get(key)
    if got is None:
        try:
            got = _analyse(spec, lib, tile, memo)
        except FusionError as e:
            got = str(e)
        memo.layouts[key] = got
    if isinstance(got, str):
        raise FusionError(got)
    return got if got.spec is spec else replace(got, spec=spec)


def _analyse(spec: KernelSpec, lib: Library, tile: tuple[int, int] | None, memo: ScheduleMemo | None) -> Layout:
    sch = Scheduler(spec, lib, tile)
    sch.schedule(memo)
    buffered = frozenset(k for k, el in sch.elements.items() if el.buffers > 1)
    for s in sch.steps if buffered else ():
        if s.phase != "loop" and any(a.element in buffered for a in s.accesses):
            raise FusionError(f"{spec.name}: {s.kc.call.text()} ({s.routine.name if s.routine else 'clear'}) uses a "
                              "two-copy local outside the serial loop (its copies alternate by iteration)")
    elements: Mapping[str, Element]
    if sch.state is None or memo is None:
        elements, pl = MappingProxyType(dict(sch.elements)), place(spec, sch.elements, sch.steps)
    else:
        elements, pl = _placed(spec, sch.state[0], sch.steps, memo)
    flags = barriers(sch.steps, pl, buffered)
    steps = tuple(replace(s, barrier=f) if f else s for s, f in zip(sch.steps, flags))
    return Layout(spec, lib, tile, elements, steps, pl)


def _placed(spec: KernelSpec, kept: dict[str, Element], steps, memo: ScheduleMemo
            ) -> tuple[Mapping[str, Element], Placement]:
    """The elements of a schedule kept in the ``memo`` (``kept``: ``Scheduler.state``'s, not
    changed) read only, and their placement (``place``), found once for the schedules along i
    and along j that share them (twins: their steps differ in phase only, which placement does
    not read)."""
    got = memo.placed.get(id(kept))
    if got is None or got[0] is not kept:
        try:
            pl: Placement | str = place(spec, kept, steps)
        except FusionError as e:
            pl = str(e)
        got = memo.placed[id(kept)] = (kept, MappingProxyType(kept), pl)
    if isinstance(got[2], str):
        raise FusionError(got[2])
    return got[1], got[2]


def finish(base: Layout, spec: KernelSpec | None = None, frame: Frame | None = None) -> Layout:
    """The layout of ``spec`` (an (unroll, span) copy of ``base``'s spec; default: ``base``'s)
    with its checks, its steps run once per span marked and its frame."""
    spec = spec or base.spec
    pl = base.placement
    check_copies_in_registers(spec, pl)
    outside, per_slot = copy_sets(spec, base.elements, base.steps)
    steps = base.steps
    if spec.span > 1:
        check_span(spec, base.elements, steps, per_slot)
        steps = tuple(replace(s, once_per_span=not step_per_slot(s, per_slot)) for s in steps)
    check_register_entries(spec, base.elements, steps, pl)
    lay = replace(base, spec=spec, steps=steps, outside=frozenset(outside), per_slot=frozenset(per_slot))
    return replace(lay, frame=frame or make_frame(lay))


def copy_layouts(spec: KernelSpec, lib: Library, copies, memo: ScheduleMemo | None = None, reasons: bool = True
                 ) -> list[Layout | FusionError]:
    """The layout of ``spec`` with each (unroll, span) of ``copies``: scheduled, placed and given
    its barriers once (none of which depends on them), finished per copy.  Each entry is the
    layout or the FusionError that refused it (with ``reasons`` False: ``REFUSED``, for a caller
    that only counts refusals -- the search's).  ``memo``: see ``analyse``.

    The copies pass ``finish``'s checks in its order, but what does not depend on the unroll or
    on the span's width is found once: the frame (or why it was refused), the elements used
    outside the loop, and with no span and with any span > 1 the per-slot elements, their
    register entries, ``check_span``'s verdict and the steps (``_Slots``)."""
    base = analyse(spec if spec.unroll == 1 and spec.span == 1 else replace(spec, unroll=1, span=1), lib, memo)
    out: list[Layout | FusionError] = []
    frame: Frame | FusionError | None = None
    # what the copies share depends on the analysis alone: with a memo, found once for the
    # analysis (kept with its steps), whatever the instances per block
    shared = memo.copies.get(id(base.steps)) if memo is not None else None
    if shared is None or shared[0] is not base.steps:
        outside = frozenset(a.element for s in base.steps if s.phase != "loop" for a in s.accesses)
        shared = (base.steps, outside, {}, {})
        if memo is not None:
            memo.copies[id(base.steps)] = shared
    outside = shared[1]
    slots: dict[bool, _Slots] = shared[2]      # by span > 1
    # the refusals of copies: what they say depends on the analysis, the spec's name, the unroll
    # and the span only (not on the instances per block), so they are made once per analysis
    refusals: dict[tuple, FusionError] = shared[3]
    pl = base.placement
    # check_copies_in_registers refuses a copy (unrolled or spanned) exactly when these hold
    no_copies = bool(pl.shared) or any(kc.variant.whole for kc in spec.calls)
    name = spec.name
    for unroll, span in copies:
        if out and isinstance(out[0], FusionError) and copies[0] == (1, 1):
            out.append(out[0])          # copies only add constraints to the refused single one
            continue
        # the checks in finish's order; a refusal is made (not raised) where one is found
        copied = unroll > 1 or span > 1
        if copied and no_copies:
            refused = refusals.get(("registers", name, unroll > 1, span)) if reasons else REFUSED
            if refused is None:     # the key: all its refusal depends on
                refused = refusals[("registers", name, unroll > 1, span)] = _refusal(
                    check_copies_in_registers, replace(spec, unroll=unroll, span=span), pl)
            out.append(refused)
            continue
        if span != 1 and spec.nesting == 1:
            refused = refusals.get(("choices", name, span)) if reasons else REFUSED
            if refused is None:     # check_spec's that a span can fail
                refused = refusals[("choices", name, span)] = _refusal(
                    check_copy_choices, replace(spec, unroll=unroll, span=span))
            out.append(refused)
            continue
        sl = slots.get(span > 1)
        if sl is None:
            sl = slots[span > 1] = _Slots(replace(spec, unroll=unroll, span=span) if copied else base.spec,
                                          base, outside)
        a, b, c, d = sl.sums
        if a + span * b + unroll * (c + span * d) > MAX_REGISTER_SLOTS:
            refused = refusals.get(("slots", name, unroll, span)) if reasons else REFUSED
            if refused is None:
                refused = refusals[("slots", name, unroll, span)] = _refusal(
                    check_register_slots, replace(spec, unroll=unroll, span=span), sl.sums)
            out.append(refused)
            continue
        if frame is None:
            try:        # the same for every copy
                frame = frame_of(spec, lib, base.tile, base.steps, pl.shared_size, memo, base.elements)
            except FusionError as e:
                frame = e.with_traceback(None)
        if isinstance(frame, FusionError):
            out.append(FusionError(str(frame)) if reasons else REFUSED)
        elif sl.refused is not None:
            out.append(FusionError(sl.refused) if reasons else REFUSED)
        else:
            out.append(replace(base, spec=replace(spec, unroll=unroll, span=span) if copied else base.spec,
                               steps=sl.steps, outside=outside, per_slot=sl.per_slot, frame=frame))
    return out


# copy_layouts' refusal of a copy where its reason is not asked for (never raised: no traceback is kept)
REFUSED = FusionError("refused (the reason was not asked for)")


def _refusal(check, *args) -> FusionError:
    """The FusionError a check raises with these arguments (it is known to refuse them), kept
    without its frames (no reference cycles)."""
    try:
        check(*args)
    except FusionError as e:
        return e.with_traceback(None)
    raise AssertionError(f"{check.__name__} did not refuse")


class _Slots:
    """What the copies of a kernel with no span, or with any span > 1, share: the elements with
    a copy per slot, their register entries (``slot_sums``), why ``check_span`` refuses the
    span (None: it does not, or no span) and the steps, marked once per span where they are."""

    def __init__(self, spec: KernelSpec, base: Layout, outside: frozenset[str]):
        # copy_sets' per-slot elements: with no span, every element
        self.per_slot = frozenset(copy_sets(spec, base.elements, ())[1] if spec.span > 1 else base.elements)
        self.sums = slot_sums(base.placement, outside, self.per_slot)
        self.refused: str | None = None
        self.steps = base.steps
        if spec.span > 1:
            self.refused, per_step = span_slots(spec, base.elements, base.steps, self.per_slot)
            self.steps = tuple(s if s.once_per_span is not per else replace(s, once_per_span=not s.once_per_span)
                               for s, per in zip(base.steps, per_step))


def check_spec(spec: KernelSpec, lib: Library, memo: ScheduleMemo | None = None) -> tuple[int, int] | None:
    """Refuse impossible kernel choices; the instances' tile of a nested kernel (else None).
    What the checks read of the calls alone (``_calls_facts``) is kept in the ``memo`` by the
    calls' tuple, which a fusion's specs share."""
    nests, on_rows, clusters, tiles = _calls_facts(spec.calls, lib, memo)
    if len(nests) != 1:
        raise FusionError(f"{spec.name}: calls of different nesting depth cannot share a kernel")
    if on_rows:
        raise FusionError(f"{spec.name}: a variant on the rows of strips runs beside a matrix call "
                          "whose strips it shares")
    check_copy_choices(spec)
    if spec.nesting == 2 and spec.ipb != 1:
        raise FusionError(f"{spec.name}: nested kernels run one instance per block")
    if spec.loop not in AXES[spec.nesting]:
        raise FusionError(f"{spec.name}: loop axis {spec.loop!r} is not an instance axis")
    if spec.nesting != 2:
        return None
    if len(clusters) != 1:
        raise FusionError(f"{spec.name}: calls of clusters of {' and '.join(map(str, sorted(clusters)))} blocks "
                          "cannot share a kernel (a cluster's blocks walk the same strips)")
    C, axis = spec.cluster
    if C > 1 and spec.loop == AXES[2][axis]:
        raise FusionError(f"{spec.name}: the blocks of a cluster span {spec.loop} together: the serial loop "
                          f"walks the other axis")
    assert tiles is not None, "nested calls have their tiles"
    if len(tiles) != 1:
        raise FusionError(f"{spec.name}: calls whose instances are tiles of different shapes "
                          f"({', '.join(f'{r}x{c}' for r, c in sorted(tiles))}) cannot share a kernel")
    (tile,) = tiles
    return tile


def _calls_facts(calls: tuple[KernelCall, ...], lib: Library, memo: ScheduleMemo | None
                 ) -> tuple[set[int], bool, set[int], set[tuple[int, int]] | None]:
    """What ``check_spec`` reads of a kernel's calls: (their nestings, are they all on the rows of
    strips, their clusters and, for nested calls, their tiles)."""
    if memo is not None:
        got = memo.checks.get(id(calls))
        if got is not None and got[0] is calls:
            return got[1]
    nests = {kc.nesting for kc in calls}
    facts = (nests, all(kc.on_rows for kc in calls), {kc.cluster for kc in calls},
             {kc.tile(lib) for kc in calls} if nests == {2} else None)
    if memo is not None:
        memo.checks[id(calls)] = (calls, facts)
    return facts


def check_copy_choices(spec: KernelSpec) -> None:
    """The checks of ``check_spec`` that the unroll and span enter, in its order."""
    if spec.iters < 0 or spec.ipb < 1 or spec.unroll < 1 or spec.span < 1:
        raise FusionError(f"{spec.name}: iterations must be >= 0 (0: auto), instances per block, "
                          "unroll and span >= 1")
    if spec.nesting == 1 and spec.span != 1:
        raise FusionError(f"{spec.name}: a span across the loop axis needs a nested kernel")


# -- placement -------------------------------------------------------------------------------
def place(spec: KernelSpec, elements: Mapping[str, Element], steps) -> Placement:
    """Registers for elements whose every access has the same mapping, else shared memory."""
    registers: dict[str, int] = {}
    shared: dict[str, int] = {}
    by_elem: dict[str, list[Access]] = {}
    mixed: set[str] = set()         # elements accessed with more than one (mapping, threads)
    for s in steps:
        for a in s.accesses:
            got = by_elem.get(a.element)
            if got is None:
                by_elem[a.element] = [a]
            else:
                if a is not got[0] and (a.mapping != got[0].mapping or a.threads != got[0].threads):
                    mixed.add(a.element)
                got.append(a)
    offset = 0
    for key, accs in by_elem.items():
        first = accs[0]
        mapping = first.mapping
        # one identity (Access.identity: mapping and threads), not arbitrary indexing
        if mapping != "any" and key not in mixed and MAPPINGS[mapping].registers:
            registers[key] = mapping_slots(mapping, elements[key].shape, *first.threads)
            continue
        bad = [a.mapping for a in accs if not MAPPINGS[a.mapping].shared]
        if bad:
            raise FusionError(f"{spec.name}: element {key} is accessed with different mappings "
                              f"but mapping {bad[0]} cannot use shared memory")
        shared[key] = offset
        offset += elements[key].size * elements[key].buffers
    return Placement(MappingProxyType(registers), MappingProxyType(shared), offset)


# -- barriers --------------------------------------------------------------------------------
def barriers(steps, pl: Placement, buffered: frozenset[str] = frozenset()) -> list[bool]:
    """Which steps need a local barrier before them (paper, Algorithm 2, line 1).  An element
    with two copies (``buffered``) used by alternate instances along the loop axis carries no
    conflict across the loop's back edge: the next instance writes the other copy, and the
    barrier that separates this instance's writer from its readers separates the readers from
    the writer two instances later (one barrier per instance instead of two)."""
    flags = [False] * len(steps)
    if not pl.shared:
        return flags                # nothing in shared memory: nothing to guard
    since: list[Access] = []
    in_shared = [[a for a in s.accesses if a.element in pl.shared] for s in steps]

    def visit(n: int) -> None:
        nonlocal since
        shared = in_shared[n]
        if shared and since and any(_conflict(a, b) for a in shared for b in since):
            flags[n] = True
        if flags[n]:
            since = []
        since.extend(shared)

    by_phase = {ph: [n for n, s in enumerate(steps) if s.phase == ph] for ph in ("pre", "loop", "post")}
    for n in by_phase["pre"]:
        visit(n)
    entry = list(since)
    for _ in range(3):              # until the loop body's barriers are stable
        since = list(entry)
        for n in by_phase["loop"]:
            visit(n)
        since = [a for a in since if a.element not in buffered]     # across the back edge
        before = list(flags)
        for n in by_phase["loop"]:
            visit(n)
        if flags == before:
            break
    for n in by_phase["post"]:
        visit(n)
    return flags


def _conflict(a: Access, b: Access) -> bool:
    """Two shared-memory accesses race without a barrier between them."""
    if a.element != b.element:
        return False
    if a.mode == "r" and b.mode == "r":
        return False
    return a.identity is None or a.identity != b.identity


# -- frame -----------------------------------------------------------------------------------
def make_frame(lay: Layout, memo: ScheduleMemo | None = None) -> Frame:
    """The copy-independent part of a laid-out kernel, with its checks (``frame.frame_of``;
    raises FusionError)."""
    return frame_of(lay.spec, lay.lib, lay.tile, lay.steps, lay.placement.shared_size, memo)
