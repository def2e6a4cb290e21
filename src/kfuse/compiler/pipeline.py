"""The compiler's pipeline: each stage a function over typed, immutable artifacts, named and timed
(``passes.PassTimes``: ``kfuse plan --timings``).

    library -> parse -> space -> rank -> partition -> lower -> emit -> load

- **library** (``kfuse.api``): the library folders loaded and checked -> ``Library``;
- **parse** (``parse``): script text (or, for the jit, a traced function: ``frontend/calls.py``)
  -> ``Program``;
- **space**, **rank**, **partition** (``plan_program``; the stages are ``fusion/stages.py``): the legal
  fusions and their implementations -> ``Spaced``; priced by the model -> ``RankedSpace``;
  partitions of the calls into kernels, the horizontal pass, and the plan chosen (the tuning
  store's winner, else the best predicted) -> ``Planned`` (its ``PlanSearch`` and ``Plan``);
- **lower** (``lower``): the plan's kernels laid out -> ``KernelCode`` each;
- **emit** (``emit``): the kernels as one CUDA module -> text, rendered when first read (the
  artifact's ``render_module``: ``make_artifact``);
- **load** (``load``): the module compiled by NVRTC onto a device, kept by the runtime per
  artifact (``runtime/modules.py``).

``Options`` are the compile options a compiler session (``session.py``) keys its artifacts by."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Mapping

import numpy as np

from ..codegen import generate
from ..codegen.kernel import KernelCode
from ..codegen.module import module_source
from ..frontend import parse_script
from ..errors import KfuseError
from ..fusion import stages
from ..fusion.plans import PlanSearch, unfused_plan
from ..fusion.stages import SearchOptions
from ..ir.artifact import Artifact
from ..ir.plan import Plan
from ..ir.program import Program
from ..library.schema import Library
from ..progress import PASSES, PassTimes
from ..tuning.store import stored_plan

#: the stages of a compile, in data-flow order (``PassTimes.describe`` lists them so)
STAGES = PASSES


@dataclass(frozen=True)
class Options:
    """The options of a compile: fused or one kernel per call, the tuning store consulted (True:
    the default one, a path, False: none) and what the search may build."""
    fuse: bool = True
    tuned: object = field(default=True, hash=False)     # bool | str | Path | TuningStore
    search: SearchOptions = SearchOptions()


@dataclass(frozen=True, eq=False)
class Planned:
    """The partition stage's answer: the search (None for an unfused compile), the plan chosen,
    and whether it is the tuning store's winner."""
    search: PlanSearch | None
    plan: Plan
    from_store: bool = False
    kernels: tuple[KernelCode, ...] | None = None     # the plan built (a stored plan is built to be checked)


def parse(source: str, lib: Library, file: str, name: str | None = None) -> Program:
    """The parse stage: script text to the program IR."""
    return parse_script(source, lib, file, name)


def plan_program(program: Program, lib: Library, dtype: str, options: Options, model, sizes: dict[str, int] | None,
         timer: PassTimes) -> Planned:
    """The space, rank and partition stages: ``program`` planned at ``sizes`` (script size name ->
    value) by ``model``."""
    if not options.fuse:
        with timer("partition"):
            return Planned(None, unfused_plan(program, lib))
    with timer("space"):
        spaced = stages.space(program, lib, sizes, options.search)
    with timer("rank"):
        ranked = stages.rank(spaced, model, np.dtype(dtype).itemsize)
    with timer("partition"):
        search = PlanSearch.of(stages.partition(ranked))
        stored = stored_plan(program, search, dtype, options.tuned)
    if stored is not None:
        try:                    # a record is data read from disk: its plan must still build
            return Planned(search, stored, True, lower(stored, lib, timer))
        except KfuseError as e:
            logging.getLogger("kfuse").warning(f"stored plan for {program.name} ignored: {e}")
    return Planned(search, search.best())


def lower(plan: Plan, lib: Library, timer: PassTimes) -> tuple[KernelCode, ...]:
    """The lower stage: each kernel of the plan laid out and built (``codegen``)."""
    with timer("lower"):
        return tuple(generate(plan, lib))


def emit(kernels: tuple[KernelCode, ...], lib: Library, dtype: str, title: str) -> str:
    """The emit stage: the kernels as one CUDA module, ``title`` in its head comment.  Run when
    the text is first needed (an artifact's ``own_source``: loading it on a GPU, or reading
    ``cuda_source``), not by every compile: a plan asked for and not run is never emitted
    (``kfuse plan``, the tuner's candidates, which share one module).  Whoever times it names
    it (``kfuse plan --timings`` does)."""
    return module_source(list(kernels), lib, dtype, title=title)


def load(artifact: Artifact, device: int, orders: tuple[int, ...] = ()):
    """The load stage: the artifact's module compiled (NVRTC) and loaded on ``device``, built for
    the kernels' block orders; kept by the runtime per artifact (``runtime/modules.py``)."""
    from ..runtime import modules
    return modules.module(artifact, device, orders)


def uncovered_at(kernels: tuple[KernelCode, ...], dims: Mapping[int, int]) -> str | None:
    """Why a kernel whose tiles span an axis whole (strips of whole rows: a reduction's result
    used in its kernel) cannot run at sizes ``dims`` -- the axis is longer than its strip -- or
    None when every kernel can."""
    for code in kernels:
        L = code.launch
        whole = {a for kc in code.spec.calls for a in kc.variant.whole}
        for n, (axis, d, extent) in enumerate(zip(("i", "j"), L.axis_dims, L.axis_extent)):
            C = L.cluster if n == L.cluster_axis else 1      # blocks spanning the axis together
            if axis in whole and -(-dims[d] // extent) > C:
                what = "rows" if axis == "j" else "columns"
                return (f"kernel {L.kernel} reads {what} of {dims[d]} entries in strips of {extent}"
                        + (f" x {C} blocks" if C > 1 else ""))
    return None


def describe_plan(program: Program, plan: Plan, kernels: tuple[KernelCode, ...]) -> str:
    """The plan with each kernel's launch configuration (the module's head comment)."""
    lines = [plan.describe()]
    for k in kernels:
        L = k.launch
        lines.append(f"  {L.kernel}: {L.threads} threads per block, {L.smem_bytes_per_real} shared entries, "
                     f"{k.barriers} barrier(s), {len(k.placement.registers)} element(s) in registers"
                     + (f"; cleared first: {', '.join(v.name for v, _ in L.clears)}" if L.clears else ""))
    arithmetic = program.returned_arithmetic()
    if arithmetic:
        lines.append(f"  returned arithmetic: {', '.join(a.text(limit=120) for a in arithmetic)} "
                     "(one kf_scalars launch after the plan)")
    return "\n".join(lines)


def _own_module(program: Program, plan: Plan, kernels: tuple[KernelCode, ...], lib: Library, dtype: str) -> str:
    title = f"script {program.file} ({program.name})\n" + describe_plan(program, plan, kernels)
    return emit(kernels, lib, dtype, title)


def _persistent_module(program: Program, plan: Plan, kernels: tuple[KernelCode, ...], lib: Library, dtype: str,
                       kernel: str) -> str:
    title = f"persistent loop over script {program.file} ({program.name})\n" + describe_plan(program, plan, kernels)
    return module_source(list(kernels), lib, dtype, title=title, persistent=kernel)


def make_artifact(program: Program, plan: Plan, kernels: tuple[KernelCode, ...], lib: Library, dtype: str,
                  shared: str | None = None) -> Artifact:
    """What the runtime runs: the program, its kernels and their module (``shared``, a module
    holding them among others, else their own, emitted on first use).  Its render callables hold
    the values they render, nothing else."""
    return Artifact(program, dtype, kernels,
                    render_module=partial(_own_module, program, plan, kernels, lib, dtype),
                    render_persistent=partial(_persistent_module, program, plan, kernels, lib, dtype),
                    shared=shared)


__all__ = ["Options", "Planned", "STAGES", "describe_plan", "emit", "load", "lower", "make_artifact", "parse",
           "plan_program", "uncovered_at"]
