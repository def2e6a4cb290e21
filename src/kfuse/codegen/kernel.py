"""One kernel from one or more calls: its layout (``layout.py``), its launch description and
its CUDA text (``emit.py``, rendered only when asked for: ranking needs none of it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Callable

from ..errors import FusionError
from ..ir.kernel import KernelSpec, LaunchInfo
from ..ir.record import quick_init
from ..library.schema import Library
from .emit import render, render_device
from .layout import (MAX_REGISTER_SLOTS, MAX_SHARED_BYTES, Access, Element, Layout, Placement, Step,
                     copy_layouts, layout, replace)
from .schedule import ScheduleMemo

__all__ = ["MAX_REGISTER_SLOTS", "MAX_SHARED_BYTES", "Access", "Element", "KernelCode", "Placement", "Step",
           "build_copies", "build_kernel", "carried"]


@quick_init
@dataclass(frozen=True)
class KernelCode:
    spec: KernelSpec
    render: Callable[[], tuple[str, tuple[str, ...]]] = field(repr=False, compare=False)
    sources: tuple[str, ...]        # library .cu files it needs (paths)
    launch: LaunchInfo
    placement: Placement
    steps: tuple[Step, ...]

    @cached_property
    def _text(self) -> tuple[str, tuple[str, ...]]:
        return self.render()

    @property
    def source(self) -> str:
        """The __global__ function."""
        return self._text[0]

    @property
    def views(self) -> tuple[str, ...]:
        """Shared-view struct definitions it needs."""
        return self._text[1]

    def device_function(self) -> tuple[str, tuple[str, ...]]:
        """(the kernel as a device function for a persistent kernel, the view structs it
        needs): ``emit.render_device`` of the same layout."""
        render_fn = self.render
        assert isinstance(render_fn, partial), "a kernel renders from its layout"
        return render_device(*render_fn.args)

    @cached_property
    def barriers(self) -> int:
        return sum(s.barrier for s in self.steps)

    @cached_property
    def serial_in_loop(self) -> bool:
        """Does a routine of the serial loop run on fewer threads than its variant's instance,
        behind a barrier (a variant's own scratch read back by part of its threads every
        iteration, the others waiting: ``gemv/smem``)?"""
        return any(s.phase == "loop" and s.barrier and s.routine is not None
                   and tuple(s.routine.threads) != tuple(s.kc.variant.threads) for s in self.steps)


def build_kernel(spec: KernelSpec, lib: Library) -> KernelCode:
    """Generate one kernel (raises FusionError when the choices cannot be realised)."""
    return _code(layout(spec, lib))


def build_copies(spec: KernelSpec, lib: Library, copies, memo: ScheduleMemo | None = None, reasons: bool = True
                 ) -> list[KernelCode | FusionError]:
    """The kernel of ``spec`` with each (unroll, span) of ``copies``, laid out together
    (``layout.copy_layouts``, with the ``memo`` of the program's analyses if given).  Each entry
    is the kernel or the FusionError that refused it (with ``reasons`` False: ``layout.REFUSED``)."""
    out: list[KernelCode | FusionError] = []
    first: KernelCode | None = None
    for lay in copy_layouts(spec, lib, copies, memo, reasons):
        if isinstance(lay, FusionError):
            out.append(lay)
        elif first is None:
            out.append(first := _code(lay))
        else:   # the copies of one layout: launches that differ only in span and unroll
            code = KernelCode(lay.spec, partial(render, lay), first.sources,
                              replace(first.launch, span=lay.spec.span, unroll=lay.spec.unroll),
                              lay.placement, lay.steps)
            if len(lay.spec.calls) > 1:     # where the ranking asks (legality.stalls_streams)
                # the copies' steps differ only in once_per_span, which serial_in_loop does not read
                code.__dict__["serial_in_loop"] = first.serial_in_loop
            out.append(code)
    return out


def carried(code: KernelCode, spec: KernelSpec) -> KernelCode | None:
    """The kernel the search built (``code``) as the kernel of ``spec``, or None when it is not
    that kernel.  It is when it was laid out for the same calls (the program's, by identity), with
    the same variants, macros and other choices; only the name differs (the search names every
    kernel "k"), and the name enters nothing a layout holds but its spec and the launch's
    ``kernel``.  A kernel of another fusion of the same shape (``fusion/space.py``,
    ``fusion_shape``) is not: its elements, arguments and steps name that fusion's values."""
    have = code.spec
    if (have.loop, have.ipb, have.unroll, have.span, have.iters, have.stores, len(have.calls)) != \
            (spec.loop, spec.ipb, spec.unroll, spec.span, spec.iters, spec.stores, len(spec.calls)):
        return None
    if any(a.call is not b.call or a.variant is not b.variant or a.macros != b.macros
           for a, b in zip(have.calls, spec.calls)):
        return None
    render_fn = code.render
    assert isinstance(render_fn, partial), "a kernel renders from its layout"
    lay = replace(render_fn.args[0], spec=spec)
    return KernelCode(spec, partial(render, lay), code.sources, replace(code.launch, kernel=spec.name),
                      code.placement, code.steps)


def _code(lay: Layout) -> KernelCode:
    spec, fr = lay.spec, lay.frame
    assert fr is not None, "a finished layout has its frame"
    launch = LaunchInfo(spec.name, fr.threads, spec.nesting, spec.iters, spec.ipb, fr.axis_dims, fr.extents,
                        fr.args, fr.clears, fr.smem, tuple(kc.call.index for kc in spec.calls), spec.loop,
                        spec.span, spec.unroll, any(s.phase != "loop" for s in lay.steps),
                        fr.wait_phase is not None,
                        sum(lay.placement.registers.values()) if any(kc.variant.whole for kc in spec.calls) else 0,
                        *spec.cluster, any(kc.on_rows for kc in spec.calls), spec.triangle)
    return KernelCode(spec, partial(render, lay), fr.sources, launch, lay.placement, lay.steps)
