"""The schedule of one kernel: the on-chip elements of its calls and the steps (routine calls
and clears) that access them, in the order they run, by phase.

1. ``pre``: invariant loads (inputs that do not follow the loop axis) and clears of accumulated
   outputs (reduce outputs that do not follow the loop axis)
2. ``loop``: the serial loop over ``iters`` instances along the loop axis (``i`` or ``j``,
   chosen per kernel): loads, computes, stores
3. ``post``: stores of accumulated outputs

A value produced on chip by an earlier call of the kernel is not loaded again; the same load by
two calls is issued once.  Placement, barriers and the frame follow in ``layout.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from math import prod
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import FusionError
from ..ir.kernel import KernelCall, KernelSpec
from ..ir.record import quick_init
from ..ir.program import ScalarArg, Value
from ..library.mappings import MAPPINGS
from ..library.schema import AXES, REDUCE_OPS, Library, Param, Routine


@quick_init
@dataclass(frozen=True)
class Element:
    key: str                        # C name in the kernel
    kind: str                       # scalar | subvector | tile
    shape: tuple[int, ...]
    pitch: int                      # tile row pitch in shared memory (columns + padding)
    value: Value | None             # None for a call-private local
    identity: str = "0"             # value a clear writes
    axes: tuple[str, ...] = ("i", "j")   # instance axes it follows (locals: private to the instance)
    buffers: int = 1                # 2: alternate instances along the loop axis use alternate copies

    @property
    def size(self) -> int:
        """Entries of one copy."""
        if self.kind == "tile":
            return self.shape[0] * self.pitch
        return prod(self.shape) if self.shape else 1


@quick_init
@dataclass(frozen=True)
class Access:
    element: str
    mode: str                       # r | w | acc
    mapping: str
    threads: tuple[int, int]

    @property
    def identity(self) -> tuple[str, int, int] | None:
        """Same identity = same thread-to-data mapping; None = arbitrary indexing."""
        return None if self.mapping == "any" else (self.mapping, *self.threads)


@quick_init
@dataclass(frozen=True)
class Step:
    phase: str                      # pre | loop | post
    kind: str                       # routine | clear
    kc: KernelCall
    routine: Routine | None
    accesses: tuple[Access, ...]
    element: str | None = None      # for clears
    barrier: bool = False
    once_per_span: bool = False     # runs once for the block's span of instances, not per instance




@lru_cache(maxsize=None)
def mapping_check(mapping: str, shape: tuple[int, ...], X: int, Y: int) -> str | None:
    """``MAPPINGS[mapping].check`` memoised (a pure function of few distinct arguments)."""
    return MAPPINGS[mapping].check(shape, X, Y)


@lru_cache(maxsize=None)
def mapping_slots(mapping: str, shape: tuple[int, ...], X: int, Y: int) -> int:
    """``MAPPINGS[mapping].slots`` memoised (likewise)."""
    return MAPPINGS[mapping].slots(shape, X, Y)


def call_key(kc: KernelCall) -> tuple:
    """A kernel call within one program: its call, variant (names are unique per function) and macros."""
    return (kc.call.index, kc.variant.name, kc.macros)


class ScheduleMemo:
    """What the analysis of one program's kernels found, kept while its plan space is built
    (``fusion/space.py``: thousands of kernels, many of them alike).  Keys name calls by their
    index in the program, so a memo serves one program (and its library) only.

    ``layouts``: ``layout.analyse`` of a spec by ``analysis_key`` (its calls with variants and
    macros, loop, stores and name: all the analysis reads but the checks of ``check_spec``,
    which run for every spec), the Layout or the message of the FusionError that refused it.

    ``prefixes``: the Scheduler's state after the first k calls of a spec, or the refusal's
    message.  Scheduling goes call by call and reads, besides the calls, only the spec's name,
    loop axis and tile and whether the values the calls bind are stored: the key holds those
    (``prefix_keys``: each a number naming the key of the prefix before it, the call and the values
    it stores), so specs that begin alike (variant choices differing in the last calls, one
    fusion inside a larger) schedule their common beginning once.  A nested kernel's schedule
    along j is its schedule along i but for the steps' phases (``Scheduler``'s twin): scheduling
    along i keeps the states along j too, so the spec along j finds its whole schedule here."""

    def __init__(self) -> None:
        self.layouts: dict[tuple, Any] = {}
        self.prefixes: dict[int, tuple | str] = {}
        self._prefix_numbers: dict[tuple, int] = {}     # prefix_keys: the number of each key made
        # the kernel calls of the specs built for this program, by (call index, variant index,
        # macros): one object each, so that what they memoise (thread shapes) serves every spec
        self.calls: dict[tuple, KernelCall] = {}
        # layout._frame_parts by the analysis's steps (kept with them): the frames of a kernel's
        # instances-per-block choices share them
        self.frames: dict[int, tuple[tuple, tuple]] = {}
        # frame._frame_base by the analysis's elements (kept with them): what the frames of its
        # twins along i and j share (layout._placed)
        self.frame_bases: dict[int, tuple[Mapping, tuple]] = {}
        # layout.copy_layouts' findings shared by an analysis's copies, by its steps (kept with
        # them): the elements used outside the loop, the _Slots of no span and of any span, and
        # the refusals of copies
        self.copies: dict[int, tuple[tuple, frozenset[str], dict, dict]] = {}
        # layout._calls_facts by the calls' tuple (kept with it): what check_spec reads of them
        self.checks: dict[int, tuple[tuple, tuple]] = {}
        # fusion/choices.py variant_choices: the macro choices and loop axes of a variant choice
        # (and sampled_variants: a bounded search's variant choices for a sequence of functions)
        self.choices: dict[tuple, tuple] = {}
        # frame._call_facts by kernel call (kept with it): what a frame reads of each call
        self.call_frames: dict[int, tuple[KernelCall, tuple]] = {}
        # layout._placed by the elements of a schedule kept here (kept with them): the elements read
        # only, and their placement or why it is refused
        self.placed: dict[int, tuple[dict, Mapping, Any]] = {}
        self._bound: dict[int, tuple[int, ...]] = {}    # call index -> ids of the values it binds

    @staticmethod
    def analysis_key(spec: KernelSpec) -> tuple:
        return (spec.name, spec.loop, spec.stores, spec.unroll, spec.span, tuple(call_key(kc) for kc in spec.calls))

    def prefix_keys(self, spec: KernelSpec, tile: tuple[int, int] | None, loops: tuple[str, ...] = ()
                    ) -> list[list[int]]:
        """The key of each prefix of the spec's calls (the k-th: the first k + 1 calls) along
        each of ``loops`` (default: the spec's loop axis): a number naming (the number of the
        prefix one call shorter -- of the spec's name, loop axis and tile for the first --, the
        call, the values it binds that are stored), so that a key is hashed in one step."""
        parts = []
        is_stored = spec.stores.__contains__
        for kc in spec.calls:
            bound = self._bound.get(kc.call.index)
            if bound is None:
                bound = self._bound[kc.call.index] = tuple(sorted(
                    {v.id for v in kc.call.outputs} | {v.id for a in kc.call.args
                                                      for v in (a.values() if isinstance(a, ScalarArg) else (a,))}))
            parts.append((call_key(kc), tuple(filter(is_stored, bound))))
        numbers = self._prefix_numbers
        out = []
        for loop in loops or (spec.loop,):
            keys: list[int] = []
            key: tuple = (spec.name, loop, tile)
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(numbers)
            for ck, stored in parts:
                key = (number, ck, stored)
                number = numbers.get(key)
                if number is None:
                    number = numbers[key] = len(numbers)
                keys.append(number)
            out.append(keys)
        return out


def _empty() -> Mapping:
    return MappingProxyType({})


@quick_init
@dataclass(frozen=True)
class Placement:
    """Where a kernel's elements live (``layout.place``)."""
    registers: Mapping[str, int] = field(default_factory=_empty)    # element -> slots per thread
    shared: Mapping[str, int] = field(default_factory=_empty)       # element -> offset (entries)
    shared_size: int = 0                                            # entries per instance


class _Twin:
    """The schedule of a nested kernel's calls along the other loop axis, kept beside the
    schedule along i (``Scheduler.twin``).  The loop axis decides only the steps' phases (which
    loads are hoisted, which clears and stores run outside the loop), which loads share an
    element (hoisted ones are told apart) and which exchanges of partial sums are refused: the
    elements, the order of the steps and their accesses are the same.  So the twin keeps its own
    steps and loads only; it stops where the loads it shares would differ, or where the two axes
    disagree about an exchange (``Scheduler.twin_refused``: the twin's refusal)."""

    def __init__(self, loop: str, steps: list[Step], loaded: dict[tuple, str]):
        self.loop, self.steps, self.loaded = loop, steps, loaded


class Scheduler:
    """Builds the elements and steps of a kernel's calls (``schedule``), mutable while it runs;
    ``layout.analyse`` freezes what it built.  One method per stage of scheduling (elements, loads,
    computes, stores, exchanges) and a snapshot/restore for trial placements, hence their number."""

    def __init__(self, spec: KernelSpec, lib: Library, tile: tuple[int, int] | None):
        self.spec, self.lib, self.tile = spec, lib, tile
        self.elements: dict[str, Element] = {}
        self.call_elem: dict[tuple[int, str], str] = {}     # (call index, param/local) -> element
        self.steps: list[Step] = []
        self.twin: _Twin | None = None      # with a memo: the schedule along j of a nested kernel along i
        # with a memo: the state scheduled (ScheduleMemo.prefixes), whose elements a twin shares
        self.state: tuple | None = None
        self.twin_refused: str | None = None    # why the twin refused the call being scheduled

    def shape_of(self, p: Param) -> tuple[int, ...]:
        """Entries of a parameter's element in this kernel (its tile, or the piece of a vector
        along the tile side its axis runs)."""
        return self.lib.element_shape(p.element, self.tile, p.index)

    # -- elements ------------------------------------------------------------------------
    def new_element(self, v: Value | None, base: str, p_elem: str, shape: tuple[int, ...], pad: int,
                    identity: str = "0", axes: tuple[str, ...] = ("i", "j"), buffers: int = 1) -> str:
        name, n = base, 2
        while name in self.elements:
            name, n = f"{base}_{n}", n + 1
        pitch = shape[1] + pad if p_elem == "tile" else 0
        self.elements[name] = Element(name, p_elem, shape, pitch, v, identity, tuple(axes), buffers)
        return name

    def widen_pitch(self, name: str, p: Param) -> None:
        el = self.elements[name]
        if el.kind == "tile" and el.shape[1] + p.pad > el.pitch:
            self.elements[name] = replace(el, pitch=el.shape[1] + p.pad)

    def arg_element(self, kc: KernelCall, name: str) -> str:
        """The element a routine argument refers to (outputs and locals created on first use)."""
        key = (kc.call.index, name)
        if key in self.call_elem:
            return self.call_elem[key]
        p = kc.call.function.param_map.get(name)
        if p is not None:           # an output (inputs are bound by their load)
            v = kc.call.bindings()[p.name]
            ident = REDUCE_OPS[p.reduce] if p.reduce else "0"
            el = self.new_element(v, v.label, p.element, self.shape_of(p), p.pad, ident,
                                  p.index)
            self.produced[(v.id, p.index)] = (el, p, kc)
        else:
            loc = next(loc for loc in kc.variant.locals if loc.name == name)
            el = self.new_element(None, f"{kc.call.name}_{loc.name}", loc.element,
                                  tuple(kc.value_of(x) for x in loc.shape), loc.pad, buffers=loc.buffers)
        self.call_elem[key] = el
        return el

    # -- schedule --------------------------------------------------------------------------
    def schedule(self, memo: ScheduleMemo | None = None) -> None:
        """Each call's loads, computes (with the clears they need) and stores, call by call;
        with a ``memo``, from the state after the longest prefix of the calls scheduled before."""
        self.produced: dict[tuple[int, tuple[str, ...]], tuple[str, Param, KernelCall]] = {}
        self.loaded: dict[tuple, str] = {}
        self.cleared: set[str] = set()
        calls = self.spec.calls
        if memo is None:
            for kc in calls:
                self.schedule_call(kc)
            return
        # along j, the twin of a schedule along i (nothing to twin on a triangle: it loops along i only)
        twinned = self.spec.loop == "i" and self.spec.nesting == 2 and not self.spec.triangle
        keys, *more = memo.prefix_keys(self.spec, self.tile, ("i", "j") if twinned else ())
        twin_keys = more[0] if more else None
        start = next((k for k in range(len(calls), 0, -1) if keys[k - 1] in memo.prefixes), 0)
        if start:
            got = memo.prefixes[keys[start - 1]]
            if isinstance(got, str):
                raise FusionError(got)
            self.state = got
            if start == len(calls):
                self.elements, self.steps = got[0], got[2]     # nothing to add: read, not changed
                return
            self.restore(got)
            if twinned and got[6] is not None:
                self.twin = _Twin("j", list(got[6][0]), dict(got[6][1]))
        elif twinned:
            self.twin = _Twin("j", [], {})
        for k in range(start, len(calls)):
            try:
                self.schedule_call(calls[k])
            except FusionError as e:
                memo.prefixes[keys[k]] = str(e)
                self._twin_done(memo, twin_keys, k, str(e))
                raise
            got = self.state = memo.prefixes[keys[k]] = self.snapshot()
            self._twin_done(memo, twin_keys, k, got)

    def _twin_done(self, memo: ScheduleMemo, twin_keys: list[int] | None, k: int, state: tuple | str) -> None:
        """After the k-th call: keep the twin's state under the twin's key of that prefix -- its
        refusal, or the schedule's (``state``: the state, or the message of a refusal that does not
        depend on the loop axis, which the twin shares) with its own steps and loads -- where the
        twin has one; a twin that refused has none after it."""
        if twin_keys is None:
            return
        twin, refused = self.twin, self.twin_refused
        if refused is not None:
            memo.prefixes.setdefault(twin_keys[k], refused)
            self.twin_refused = None
        elif twin is None:
            return
        elif isinstance(state, str):
            memo.prefixes.setdefault(twin_keys[k], state)
            self.twin = None
        elif twin_keys[k] not in memo.prefixes:
            elements, call_elem, steps, produced, loaded, cleared, (twin_steps, twin_loaded) = state
            memo.prefixes[twin_keys[k]] = (elements, call_elem, twin_steps, produced, twin_loaded, cleared,
                                           (steps, loaded))

    def schedule_call(self, kc: KernelCall) -> None:
        self.schedule_loads(kc)
        self.schedule_computes(kc)
        self.schedule_stores(kc)

    def snapshot(self) -> tuple:
        """The state scheduling has built (copies: it goes on changing), with its twin's steps
        and loads (None: no twin)."""
        twin = self.twin
        return (dict(self.elements), dict(self.call_elem), tuple(self.steps), dict(self.produced),
                dict(self.loaded), frozenset(self.cleared),
                (tuple(twin.steps), dict(twin.loaded)) if twin is not None else None)

    def restore(self, state: tuple) -> None:
        elements, call_elem, steps, produced, loaded, cleared, _ = state
        self.elements, self.call_elem, self.steps = dict(elements), dict(call_elem), list(steps)
        self.produced, self.loaded, self.cleared = dict(produced), dict(loaded), set(cleared)

    def schedule_loads(self, kc: KernelCall) -> None:
        loop = self.spec.loop
        index = kc.call.index
        produced, loaded, call_elem = self.produced, self.loaded, self.call_elem
        twin = self.twin
        for r, p, v, made_key, key, hoist in load_plan(kc):
            made = produced.get(made_key)
            if made is not None:    # produced on chip in this kernel: no load
                el, prod, maker = made
                if twin is not None:
                    self.twin_refused = self.exchange_refusal(kc, p, v, prod, maker, twin.loop)
                    if self.twin_refused is not None:
                        twin = self.twin = None
                why = self.exchange_refusal(kc, p, v, prod, maker, loop)
                if why is not None:
                    self.twin = None    # how the twin goes on is not known (an exchange it may allow)
                    raise FusionError(why)
                call_elem[(index, p.name)] = el
                self.widen_pitch(el, p)
                continue
            # a kernel on a triangle changes both tile indices every iteration: nothing is hoisted
            hoisted = hoist and loop not in p.index and not self.spec.triangle
            got = loaded.get(key + (hoisted,))
            if twin is not None:
                twin_hoisted = hoist and twin.loop not in p.index
                if twin.loaded.get(key + (twin_hoisted,)) != got:
                    twin = self.twin = None     # the loads shared differ along the other axis
            if got is not None:     # the same load by an earlier call: read once
                call_elem[(index, p.name)] = got
                self.widen_pitch(got, p)
                continue
            # a partial-sum input is read by one instance of those it is summed over: its
            # copy belongs to the instance, not to the axes it follows
            el = self.new_element(v, v.label, p.element, self.shape_of(p), p.pad,
                                  axes=AXES[2] if p.partial else p.index)
            loaded[key + (hoisted,)] = call_elem[(index, p.name)] = el
            phase = "pre" if hoisted else "loop"
            if twin is not None:
                twin.loaded[key + (twin_hoisted,)] = el
                self.add_routine(phase, kc, r, "pre" if twin_hoisted else "loop")
            else:
                self.add_routine(phase, kc, r, phase)

    def schedule_computes(self, kc: KernelCall) -> None:
        params = kc.call.function.param_map
        binds = kc.call.bindings()
        for r in kc.variant.computes:
            for a in r.elements:
                el = self.arg_element(kc, a.name)
                if a.mode == "acc" and el not in self.cleared:
                    # accumulated across the loop: cleared once before it; otherwise cleared
                    # in each iteration before the first routine that accumulates into it
                    # (an output only handed on as partial sums is cleared every iteration:
                    # its consumer does the accumulating)
                    p = params.get(a.name)
                    # a stored output's axes (None: not such), accumulated along a loop axis it does not follow
                    index = (p.index if p is not None and p.dir == "out" and binds[p.name].id in self.spec.stores
                             and not self.spec.triangle else None)
                    accumulated = index is not None and self.spec.loop not in index
                    self.cleared.add(el)
                    accesses = (Access(el, "w", str(a.mapping), kc.shape(r)),)
                    step = Step("pre" if accumulated else "loop", "clear", kc, None, accesses, element=el)
                    self.steps.append(step)
                    twin = self.twin
                    if twin is not None:
                        twin_pre = index is not None and twin.loop not in index
                        twin.steps.append(step if twin_pre == accumulated else
                                          Step("pre" if twin_pre else "loop", "clear", kc, None, accesses, element=el))
            self.add_routine("loop", kc, r, "loop")

    def schedule_stores(self, kc: KernelCall) -> None:
        params = kc.call.function.param_map
        binds = kc.call.bindings()
        for r in kc.variant.stores:
            assert r.param is not None      # Variant.stores: stores of parameters
            p = params[r.param]
            if binds[p.name].id not in self.spec.stores:
                continue            # consumed on chip only
            phase = "loop" if p.follows(self.spec.loop) or self.spec.triangle else "post"
            twin_phase = "loop" if self.twin is not None and p.follows(self.twin.loop) else "post"
            for f in kc.variant.finishes(p.name):   # the store's own steps before it, where it runs
                self.add_routine(phase, kc, f, twin_phase)
            self.add_routine(phase, kc, r, twin_phase)

    def check_exchange(self, kc: KernelCall, p: Param, v: Value, prod: Param, maker: KernelCall) -> None:
        """May input p of kc take the element an earlier call of this kernel produced?  A
        reduction's result only when the producer's tile spans every axis it reduces over (the
        reduction completes in the block: its barrier is a local one)."""
        why = self.exchange_refusal(kc, p, v, prod, maker, self.spec.loop)
        if why is not None:
            raise FusionError(why)

    def exchange_refusal(self, kc: KernelCall, p: Param, v: Value, prod: Param, maker: KernelCall,
                         loop: str) -> str | None:
        """Why ``check_exchange`` refuses the exchange in a serial loop along ``loop``; None
        where it does not."""
        def where() -> str:         # made only for a refusal (call.text() is not cheap)
            return f"{self.spec.name}: {kc.call.text()}: {p.name} = {v.name}"
        if prod.reduce:
            if not p.partial and not reduced_whole(maker, prod):
                axes = "".join(reduced_axes(maker, prod))
                return (f"{where()} is the result of a reduction in the same kernel "
                        f"(needs a global barrier: variant {maker.variant.name} of "
                        f"{maker.call.function.name} does not span {axes} whole)")
            if p.partial and not prod.follows(loop) and v.id in self.spec.stores:
                return (f"{where()}: partial sums are exchanged only when the producer's "
                        f"output follows the loop axis {loop} or stays on chip")
        elif p.partial:
            return f"{where()}: takes partial sums, but {v.name} is a map result"
        return None

    def add_routine(self, phase: str, kc: KernelCall, r: Routine, twin_phase: str) -> None:
        """The step of routine r of kc in ``phase`` (in ``twin_phase`` in the twin's steps)."""
        XY, args = kc.routine_plan(r)
        acc = []
        elements, call_elem, index = self.elements, self.call_elem, kc.call.index
        made = kc.accesses      # the accesses made before for this call, with their element's shape
        for name, mode, mapping in args:
            key = call_elem.get((index, name)) or self.arg_element(kc, name)
            shape = elements[key].shape
            got = made.get((key, mode, mapping, XY))
            if got is None or got[0] != shape:
                reason = mapping_check(mapping, shape, *XY)
                if reason:
                    raise FusionError(f"{kc.describe()} routine {r.name}: {name}: {reason}")
                got = made[(key, mode, mapping, XY)] = (shape, Access(key, mode, mapping, XY))
            acc.append(got[1])
        accesses = tuple(acc)
        step = Step(phase, "routine", kc, r, accesses)
        self.steps.append(step)
        twin = self.twin
        if twin is not None:
            twin.steps.append(step if twin_phase == phase else Step(twin_phase, "routine", kc, r, accesses))


def load_plan(kc: KernelCall) -> tuple[tuple[Routine, Param, Value, tuple, tuple, bool], ...]:
    """Per load routine of kc's variant: (the routine, its parameter, the value bound to it, the
    key of that value produced on chip, the key of the load but whether it is hoisted, whether
    the parameter may be hoisted) -- what ``Scheduler.schedule_loads`` reads, kept with the kernel
    call (``KernelCall.memo``: a program's specs share their kernel calls)."""
    got = kc.memo.get("loads")
    if got is None:
        params, binds = kc.call.function.param_map, kc.call.bindings()
        plan = []
        for r in kc.variant.loads:
            assert r.param is not None      # Variant.loads: loads of parameters
            p = params[r.param]
            v = binds[p.name]
            plan.append((r, p, v, (v.id, p.index), (v.id, p.index, r.fn, r.elements[0].mapping, kc.shape(r),
                                                    kc.macros), p.hoist))
        got = kc.memo["loads"] = tuple(plan)
    return got


def reduced_axes(kc: KernelCall, p: Param) -> tuple[str, ...]:
    """The instance axes output p of kc's function is reduced over (at least one: the loader)."""
    return tuple(a for a in kc.call.function.axes if a not in p.index)


def reduced_whole(kc: KernelCall, p: Param) -> bool:
    """Does kc's variant span every axis its reduced output p is reduced over (a strip of whole
    rows for a row sum)?  Then one instance completes each of p's entries: it may be used in the
    same kernel, and it is stored once -- nothing adds to it in global memory, no clear."""
    return set(reduced_axes(kc, p)) <= set(kc.variant.whole)
