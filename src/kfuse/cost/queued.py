"""A plan priced as one step of a device loop (``kfuse.fori_loop``, ``kfuse.while_loop``).

In a device loop a step's kernels are nodes of a CUDA graph that the GPU runs back to back, and
runs of consecutive one-block kernels are merged into one kernel of one block, one phase per
kernel (``runtime/merged.py``).  A kernel_time's launch and clear terms (a launch timed alone
from Python, a memset before the kernel) do not apply there.  A step costs:

    sum of its kernels' bodies (transfer, compute, barriers, atomics: kernel_time without the
    launch and the clear) + ``node`` for each graph node (a kernel, or a merged run)
    + ``phase`` for each kernel that runs as a phase of a merged run

The two terms are H100 values fitted on measured device-loop steps of five iterative methods
(docs/experiments.md, "A loop step's terms refitted"), with the runtime that compiles a merged
phase's sizes in and launches a step's first kernel early.  No
calibration measures them yet, and the planner does not rank loop bodies by this price:
``kfuse plan --loop`` shows it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..codegen.kernel import KernelCode
from ..errors import KfuseError
from ..ir.kernel import target_blocks
from ..runtime.merged import joins, spans     # the runtime's rule for merged runs
from .transfer import DEFAULT_MACHINE


@dataclass(frozen=True)
class QueuedTerms:
    node: float = 1.52e-6       # s per graph node of a step (a kernel, or a merged run)
    phase: float = 0.60e-6      # s per kernel run as a phase of a merged run


H100 = QueuedTerms()


@dataclass(frozen=True)
class StepPrice:
    seconds: float      # the step
    bodies: float       # of which the kernels' bodies
    nodes: int          # graph nodes
    phases: int         # kernels run as phases of merged runs
    grids: tuple[int, ...]      # each kernel's blocks


def body_seconds(model, code: KernelCode, dims: dict[int, int], entries: dict[int, int], itemsize: int) -> float:
    """A kernel's time without its launch and clear terms: the calibrated model's parts (a kernel
    with routines it did not measure: the transfer model's), the transfer model's ``body_time``,
    else kernel_time less the launch term."""
    parts = getattr(model, "kernel_parts", None)
    if parts is not None:
        try:
            p = parts(code, dims, itemsize)
        except KfuseError:          # routines the calibration did not measure
            return DEFAULT_MACHINE.body_time(code, dims, entries, itemsize)
        return model.kernel_time(code, dims, entries, itemsize) - p["launch"] - p["clears"]
    body = getattr(model, "body_time", None)
    if body is not None:
        return float(body(code, dims, entries, itemsize))
    return max(0.0, model.kernel_time(code, dims, entries, itemsize) - model.launch_seconds)


def step_price(model, kernels: Sequence[KernelCode], dims: dict[int, int], entries: dict[int, int],
               itemsize: int, terms: QueuedTerms = H100) -> StepPrice:
    """The price of a plan's ``kernels`` (in launch order) as one step of a device loop at sizes
    ``dims``; the grids are the launch's (serial iterations for about two waves of blocks on the
    model's GPU, as ``runtime/order.launch_shape`` sets them)."""
    dev = model.device
    grids = tuple(code.launch.grid(dims, code.launch.iterations(
        dims, target_blocks(dev["sms"], dev["max_threads_per_sm"], code.launch.threads))) for code in kernels)
    bodies = sum(body_seconds(model, code, dims, entries, itemsize) for code in kernels)
    runs = spans([joins(g, code.launch.threads, code, itemsize) for g, code in zip(grids, kernels)])
    phases = sum(e - a for a, e in runs)            # a run of one-block kernels: one node, a phase each
    nodes = len(kernels) - phases + len(runs)
    return StepPrice(bodies + nodes * terms.node + phases * terms.phase, bodies, nodes, phases, grids)


__all__ = ["QueuedTerms", "H100", "StepPrice", "step_price", "body_seconds"]
