"""A compiler session: runs the pipeline (``pipeline.py``) for one library, element type, model
and set of options, and keeps what it made under a complete key (``CompileKey``: program digest,
size class or sizes, device scalars, element type, options, model, library digest, and the plan
for a given one).  Compiled scripts are immutable; the programs planned for another size class
or for scalars read by address are the session's (``for_sizes``, ``for_device_scalars``), so a
compiled script asks its session and never changes.

``kfuse.compile`` and ``compile_program`` (the jit's, the loops') open one session per compile."""
from __future__ import annotations

import hashlib
import json
import numbers
from dataclasses import dataclass
from typing import Mapping

from .compiled import CompiledScript
from ..errors import LaunchError
from ..ir.plan import Plan, plan_from_json, plan_to_json
from ..ir.program import Program, size_class
from ..library.schema import Library
from ..progress import PassTimes
from .pipeline import Options, Planned, lower, plan_program, uncovered_at


@dataclass(frozen=True)
class CompileKey:
    """What a compiled program is a function of (see the module docstring).  ``sizes``: the size
    class (each size's power of two), ``("exact", ...)`` for sizes planned for themselves, or
    ``("at", ...)`` for the sizes a program with other device scalars was planned at; ``()`` for an
    unfused compile (one plan at every size)."""
    program: str
    sizes: tuple
    device_scalars: frozenset[str]
    dtype: str
    options: Options
    model: str
    library: str
    plan: str | None = None       # a given (pinned) plan's digest


class CompilerSession:
    """See the module docstring."""

    def __init__(self, library: Library, dtype: str, options: Options, model=None):
        self.library, self.dtype, self.options, self.model = library, dtype, options, model
        self._model_name = "" if model is None else str(getattr(model, "name", type(model).__name__))
        self._made: dict[CompileKey, CompiledScript] = {}
        self._digests: dict[tuple[str, str, str], str] = {}

    # -- keys ------------------------------------------------------------------------------------
    def key(self, program: Program, sizes: tuple, plan: Plan | None = None) -> CompileKey:
        text = (program.name, program.file, program.source)
        digest = self._digests.get(text)
        if digest is None:
            digest = self._digests[text] = hashlib.sha256("\0".join(text).encode()).hexdigest()[:16]
        pinned = None if plan is None else hashlib.sha256(
            json.dumps(plan_to_json(plan), sort_keys=True).encode()).hexdigest()[:16]
        return CompileKey(digest, sizes, program.device_scalars(), self.dtype, self.options, self._model_name,
                          self.library.digest, pinned)

    def _kept(self, key: CompileKey, make) -> CompiledScript:
        got = self._made.get(key)
        if got is None:
            got = self._made[key] = make()
        return got

    # -- the pipeline ----------------------------------------------------------------------------
    def compile(self, program: Program, sizes: dict[str, int] | None = None,
                timer: PassTimes | None = None) -> CompiledScript:
        """``program`` planned at ``sizes`` (script size name -> value), lowered; kept under its
        key (the size class it was planned at)."""
        timer = timer if timer is not None else PassTimes()
        planned = plan_program(program, self.library, self.dtype, self.options, self.model, sizes, timer)
        compiled = self._compiled(program, planned, timer)
        key_sizes = () if planned.search is None else size_class(program, planned.search.dims)
        self._made.setdefault(self.key(program, key_sizes), compiled)
        return compiled

    def _compiled(self, program: Program, planned: Planned, timer: PassTimes,
                  pinned: bool = False) -> CompiledScript:
        kernels = planned.kernels if planned.kernels is not None else lower(planned.plan, self.library, timer)
        return CompiledScript(program, self.library, self.dtype, planned.plan, kernels, planned.search, timings=timer,
                              tuned=self.options.tuned, from_store=planned.from_store, pinned=pinned, session=self)

    def _replanned(self, program: Program, dims: Mapping[int, int]) -> CompiledScript:
        """``program`` planned for sizes ``dims`` (a tuned winner for that size class preferred,
        unless its strips are narrower than these rows)."""
        timer = PassTimes()
        planned = plan_program(program, self.library, self.dtype, self.options, self.model,
                                {d.name: dims[d.id] for d in program.dims}, timer)
        compiled = self._compiled(program, planned, timer)
        if planned.from_store and uncovered_at(compiled.kernels, dims):     # a winner tuned at shorter rows of this class
            assert planned.search is not None
            compiled = self._compiled(program, Planned(planned.search, planned.search.best()), timer)
        return compiled

    def with_plan(self, compiled: CompiledScript, plan: Plan, program: Program | None = None) -> CompiledScript:
        """``program`` (default: ``compiled``'s) compiled with ``plan``, pinned (kept at every
        size), with ``compiled``'s ranking; not kept (candidates of the empirical search come and go)."""
        planned = Planned(compiled.search, plan)
        return self._compiled(compiled.program if program is None else program, planned, PassTimes(), pinned=True)

    # -- re-plans --------------------------------------------------------------------------------
    def for_sizes(self, compiled: CompiledScript, dims: Mapping[int, int]) -> CompiledScript:
        """``CompiledScript.for_sizes``: the program planned for the size class of ``dims``."""
        program = compiled.program
        if not isinstance(dims, Mapping):
            raise LaunchError(f"sizes are a dict of dimension id -> size, got {type(dims).__name__} {dims!r:.60}")
        bad = [f"{d.name} (id {d.id})" for d in program.dims if not isinstance(dims.get(d.id), numbers.Integral)
               or isinstance(dims[d.id], bool) or dims[d.id] < 1]
        if bad:
            raise LaunchError(f"sizes must be positive integers, by dimension id: {', '.join(bad)}"
                              + (f" (given {', '.join(map(repr, dims))})" if set(dims) - {d.id for d in program.dims}
                                 else ""))
        search = compiled.search
        if search is None or compiled.pinned:
            short = uncovered_at(compiled.kernels, dims)
            if short:
                raise LaunchError(f"the given plan cannot run at these sizes: {short}; compile without a "
                                  "given plan (or one for these sizes)")
            return compiled
        exact = ("exact",) + tuple(dims[d.id] for d in program.dims)
        sizes: tuple = size_class(program, dims)
        if sizes == size_class(program, search.dims):
            if not uncovered_at(compiled.kernels, dims):
                return compiled
            sizes = exact
        got = self._made.get(self.key(program, sizes))
        if got is not None and uncovered_at(got.kernels, dims):
            # the class's plan holds strips narrower than these rows: planned for these sizes
            sizes = exact
        return self._kept(self.key(program, sizes), lambda: self._replanned(program, dims))

    def for_device_scalars(self, compiled: CompiledScript, names) -> CompiledScript:
        """``CompiledScript.for_device_scalars``: the program with the scalar inputs ``names``
        read by address, planned like ``compiled`` (at its sizes; a given plan kept)."""
        program = compiled.program.with_device_scalars(names)    # a str is one name; each checked
        if program is compiled.program:
            return compiled
        search = compiled.search
        if search is None:
            return self._kept(self.key(program, ()), lambda: self.compile(program))
        if compiled.pinned:
            # the given plan, on the program whose scalars are read by address
            return self._kept(self.key(program, ("at",) + tuple(search.dims[d.id] for d in program.dims),
                                       compiled.plan),
                              lambda: self.with_plan(compiled, plan_from_json(program, plan_to_json(compiled.plan)),
                                                     program))
        return self._kept(self.key(program, ("at",) + tuple(search.dims[d.id] for d in program.dims)),
                          lambda: self._replanned(program, search.dims))

    def __repr__(self) -> str:
        return f"<kfuse.CompilerSession {self.library.name} ({self.dtype}): {len(self._made)} program(s)>"
