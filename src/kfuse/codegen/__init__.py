"""Code generation: a kernel spec (ir/kernel.py) laid out on chip and emitted as CUDA text."""
from __future__ import annotations

from ..ir.plan import Plan
from ..library.schema import Library
from .kernel import KernelCode, build_copies, build_kernel, carried


def generate(plan: Plan, lib: Library) -> list[KernelCode]:
    """The kernels of a plan, in launch order (raises FusionError when one cannot be built).  A
    kernel the search laid out for the plan's calls (``Plan.codes``) is carried, named as the
    plan names it (``kernel.carried``), not laid out again; the others are built."""
    codes = plan.codes if len(plan.codes) == len(plan.kernels) else (None,) * len(plan.kernels)
    return [(code is not None and carried(code, k)) or build_kernel(k, lib) for k, code in zip(plan.kernels, codes)]


__all__ = ["KernelCode", "build_copies", "build_kernel", "carried", "generate"]
