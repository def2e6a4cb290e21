"""The checks of a kernel's unrolled and spanned copies (``layout.copy_layouts``, ``layout.finish``):
which elements each copy multiplies, whether they fit the registers, and how a span's slots share
the elements that do not follow the axis across the loop."""
from __future__ import annotations

from typing import AbstractSet, Mapping

from ..errors import FusionError
from ..ir.kernel import KernelSpec
from .schedule import Element, Placement, Step

MAX_REGISTER_SLOTS = 128    # on-chip entries per thread in registers (with unrolled and spanned copies)


def copy_sets(spec: KernelSpec, elements: Mapping[str, Element], steps) -> tuple[set[str], set[str]]:
    """(elements used outside the serial loop, elements with one copy per span slot).  Elements
    used only inside the loop get one copy per unrolled iteration; with a span, an element that
    follows the axis across the loop has one copy per slot, and the others (vectors along the
    loop axis) are shared by the slots: loaded once, or summed over the slots and stored once."""
    outside = {a.element for s in steps if s.phase != "loop" for a in s.accesses}
    other = "j" if spec.loop == "i" else "i"
    per_slot = {key for key, el in elements.items() if spec.span == 1 or other in el.axes}
    return outside, per_slot


def check_copies_in_registers(spec: KernelSpec, pl: Placement) -> None:
    """Unrolled and spanned copies exist only for elements in registers, and not in a strip kernel
    (variants spanning an axis whole: its blocks walk their strips one at a time, codegen/emit.py)."""
    if (spec.unroll > 1 or spec.span > 1) and any(kc.variant.whole for kc in spec.calls):
        raise FusionError(f"{spec.name}: a strip kernel walks its strips one at a time "
                          "(no unrolled or spanned copies)")
    if spec.unroll > 1 and pl.shared:
        raise FusionError(f"{spec.name}: unrolled serial iterations need every element in registers "
                          f"({', '.join(pl.shared)} in shared memory)")
    if spec.span > 1 and pl.shared:
        raise FusionError(f"{spec.name}: a span of {spec.span} instances across the loop needs every element "
                          f"in registers ({', '.join(pl.shared)} in shared memory)")


def check_register_entries(spec: KernelSpec, elements: Mapping[str, Element], steps, pl: Placement) -> None:
    """The elements in registers, with their unrolled and spanned copies, must not spill."""
    check_register_slots(spec, slot_sums(pl, *copy_sets(spec, elements, steps)))


def slot_sums(pl: Placement, outside: AbstractSet[str], per_slot: AbstractSet[str]) -> tuple[int, int, int, int]:
    """Register entries per thread of the elements in registers used outside the loop with one
    copy for the span's slots, outside with one per slot, inside with one, inside with one per
    slot: an unroll U and a span V give (a + V b) + U (c + V d) entries."""
    sums = [0, 0, 0, 0]
    for key, n in pl.registers.items():
        sums[(0 if key in outside else 2) + (1 if key in per_slot else 0)] += n
    return sums[0], sums[1], sums[2], sums[3]


def check_register_slots(spec: KernelSpec, sums: tuple[int, int, int, int]) -> None:
    """``check_register_entries`` with the elements' ``slot_sums`` given."""
    U, V = spec.unroll, spec.span
    a, b, c, d = sums
    slots = a + V * b + U * (c + V * d)
    if slots > MAX_REGISTER_SLOTS:
        raise FusionError(f"{spec.name}: {slots} register entries per thread for {U} unrolled iteration(s) "
                          f"x {V} span slot(s) (at most {MAX_REGISTER_SLOTS}: more would spill)")


def step_per_slot(s: Step, per_slot: AbstractSet[str]) -> bool:
    """Does the step run once per span slot?  Computes always do; loads, clears and stores when
    their element has a copy per slot."""
    if s.routine is not None and s.routine.kind == "compute":
        return True
    return any(a.element in per_slot for a in s.accesses)


def check_span(spec: KernelSpec, elements: Mapping[str, Element], steps, per_slot: AbstractSet[str]) -> None:
    """Elements shared by the span's slots are either loaded once and read by every slot, or
    partial results that every slot adds to (cleared before the slots, stored after them)."""
    refused = span_slots(spec, elements, steps, per_slot)[0]
    if refused is not None:
        raise FusionError(refused)


def span_slots(spec: KernelSpec, elements: Mapping[str, Element], steps, per_slot: AbstractSet[str]
               ) -> tuple[str | None, list[bool]]:
    """(why ``check_span`` refuses the span, None where it does not; ``step_per_slot`` of each
    step), found in one pass over the steps."""
    by_element: dict[str, list] = {}        # each element's (step, access) pairs, in step order
    per_step: list[bool] = []
    lone = None             # the first compute step that touches no per-slot element
    for s in steps:
        touches = False
        for a in s.accesses:
            if a.element in per_slot:
                touches = True
            else:
                got = by_element.get(a.element)
                if got is None:
                    by_element[a.element] = [(s, a)]
                else:
                    got.append((s, a))
        compute = s.routine is not None and s.routine.kind == "compute"
        if compute and not touches and lone is None:
            lone = s
        per_step.append(compute or touches)
    for key in elements:
        if key in per_slot:
            continue
        accs = by_element.get(key, [])
        loaded = any(s.routine is not None and s.routine.kind == "load" for s, _ in accs)
        for s, a in accs:
            if s.routine is None or s.routine.kind != "compute":
                continue
            if (loaded and a.mode != "r") or (not loaded and a.mode != "acc"):
                return (f"{spec.name}: with a span across the loop, {s.kc.call.text()} ({s.routine.name}) "
                        f"{'writes' if loaded else 'reads'} {key}, which the span's instances share"), per_step
    if lone is not None:
        assert lone.routine is not None
        return (f"{spec.name}: with a span across the loop, {lone.kc.call.text()} ({lone.routine.name}) "
                "touches no per-instance data"), per_step
    return None, per_step
