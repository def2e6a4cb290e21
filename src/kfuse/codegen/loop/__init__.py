"""Code generation for device loops: every CUDA text a loop's runtime compiles, written from the
descriptions in ``ir/loop.py`` -- the control module of the small kernels around a step
(``control.py``), the persistent kernel (``persistent.py``), the merged kernels and the early
head (``merged.py``), the C of scalar expressions (``cexpr.py``) -- and the scalar expression
builders with the returned arithmetic's module (``scalars.py``).  ``LoopWriter`` is the writer a
``LoopArtifact`` hands the runtime (``ir/loop.LoopKernelWriter``)."""
from __future__ import annotations

from typing import Sequence

from ...ir.loop import Expr, Kernel, MergedShape, PersistentShape
from . import merged, persistent
from .control import control_source
from .scalars import ScalarCode, expression, script_expression


class LoopWriter:
    """The loop's CUDA text (``ir/loop.LoopKernelWriter``): stateless, every method a function of
    its arguments."""

    def control(self, dtype: str, tails: Sequence[Expr], predicate: Expr | None, conditional: bool,
                clears: int, saved: int, carried: int) -> str:
        return control_source(dtype, tails, predicate, conditional, clears=clears, saved=saved, carried=carried)

    def persistent(self, shape: PersistentShape, dtype) -> str:
        return persistent.kernel_text(shape, dtype)

    def merged(self, shape: MergedShape, dtype, name: str) -> str:
        return merged.kernel_text(shape, dtype, name)

    def head(self, kernel: Kernel, sizes: tuple, name: str) -> str:
        return merged.head_text(kernel, sizes, name)


WRITER = LoopWriter()       # the one writer the loops hand over

__all__ = ["LoopWriter", "ScalarCode", "WRITER", "control_source", "expression", "script_expression"]
