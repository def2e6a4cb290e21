"""Code generation: a kernel spec (ir/kernel.py) laid out on chip and emitted as CUDA text."""
from __future__ import annotations

from ..ir.plan import Plan
from ..library.schema import Library
from .kernel import KernelCode, build_copies, build_kernel


def generate(plan: Plan, lib: Library) -> list[KernelCode]:
    """The kernels of a plan, in launch order (raises FusionError when one cannot be built)."""
    return [build_kernel(k, lib) for k in plan.kernels]


__all__ = ["KernelCode", "build_copies", "build_kernel", "generate"]
