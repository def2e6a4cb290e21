"""The program IR: values (each assignment a new value), calls, and symbolic sizes.

Sizes are symbolic: every vector length and matrix side is a *dimension* (``Dim``); calls
unify dimensions through the instance axes of the called function (``gemv(A, x)`` makes
``x``'s length equal ``A``'s column count).  At run time the input arrays bind the
dimensions and every constraint is checked.
"""
from __future__ import annotations

from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping
from dataclasses import dataclass, field

from ..library.schema import Function


@dataclass(frozen=True)
class Value:
    id: int
    name: str                   # script name (several values may share one after reassignment)
    label: str                  # unique, C-identifier-safe: the name, or name_2, name_3 ...
    type: str                   # scalar | vector | matrix
    dims: tuple[int, ...]       # dimension ids (vector: 1, matrix: rows, cols; scalar: none)
    is_input: bool = False


@dataclass(frozen=True)
class ScalarArg:
    """A scalar argument: an input scalar value (maybe negated) or a literal."""
    value: Value | None
    literal: float | None = None
    negate: bool = False

    def text(self) -> str:
        if self.value is None:
            return repr(self.literal)
        return ("-" if self.negate else "") + self.value.name


@dataclass(frozen=True)
class Call:
    index: int
    function: Function
    args: tuple[Value | ScalarArg, ...]     # aligned with function.inputs (scalars as ScalarArg)
    outputs: tuple[Value, ...]              # aligned with function.outputs
    line: int
    axes: tuple[int, ...]                   # dimension id of each instance axis (i, j)

    @property
    def name(self) -> str:
        return f"c{self.index}_{self.function.name}"

    def bindings(self) -> Mapping[str, Any]:
        """Parameter name -> argument (inputs) or value (outputs), read-only (made once: code
        generation asks for it tens of thousands of times on a long script).  A ``Value`` for an
        array parameter, a ``ScalarArg`` for a scalar input (typed Any: the parameter's type,
        which the caller knows, says which)."""
        return self._bindings

    @cached_property
    def _bindings(self) -> Mapping[str, Value | ScalarArg]:
        out: dict[str, Value | ScalarArg] = {p.name: a for p, a in zip(self.function.inputs, self.args)}
        out.update({p.name: v for p, v in zip(self.function.outputs, self.outputs)})
        return MappingProxyType(out)

    def text(self) -> str:
        args = ", ".join(a.text() if isinstance(a, ScalarArg) else a.name for a in self.args)
        return f"{', '.join(v.name for v in self.outputs)} = {self.function.name}({args})"


@dataclass(frozen=True)
class Dim:
    id: int
    name: str                   # declared name, or an automatic one like "x.len"
    literal: int | None = None  # a size fixed by the script


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    file: str
    values: tuple[Value, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    calls: tuple[Call, ...]
    dims: tuple[Dim, ...]                   # one per dimension class (after unification)
    library_digest: str
    dim_of: dict[int, int] = field(default_factory=dict, compare=False)   # raw dim id -> class id

    def dim(self, d: int) -> Dim:
        return self.dims[self.dim_of.get(d, d)]

    def shape_names(self, v: Value) -> tuple[str, ...]:
        return tuple(self.dim(d).name for d in v.dims)

    def producer(self, v: Value) -> Call | None:
        return next((c for c in self.calls if v in c.outputs), None)

    def consumers(self, v: Value) -> tuple[Call, ...]:
        return tuple(c for c in self.calls if any(a is v or (isinstance(a, ScalarArg) and a.value is v)
                                                  for a in c.args))
