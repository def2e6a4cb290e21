"""The program IR: values (each assignment a new value), calls, and symbolic sizes.

Sizes are symbolic: every vector length and matrix side is a *dimension* (``Dim``); calls
unify dimensions through the instance axes of the called function (``gemv(A, x)`` makes
``x``'s length equal ``A``'s column count).  At run time the input arrays bind the
dimensions and every constraint is checked.
"""
from __future__ import annotations

import math
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping
from dataclasses import dataclass, field, replace

from ..library.schema import Function


@dataclass(frozen=True)
class Value:
    id: int
    name: str                   # script name (several values may share one after reassignment)
    label: str                  # unique, C-identifier-safe: the name, or name_2, name_3 ...
    type: str                   # scalar | vector | matrix
    dims: tuple[int, ...]       # dimension ids (vector: 1, matrix: rows, cols; scalar: none)
    is_input: bool = False
    on_device: bool = False     # a scalar input bound to a 0-d device array: passed by address


SCALAR_BINARY = ("+", "-", "*", "/")
SCALAR_UNARY = ("neg", "sqrt")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclass(frozen=True)
class ScalarArg:
    """A scalar argument: a scalar value (an input, or a scalar an earlier call computed), maybe
    negated; a literal; or arithmetic over such (``op`` one of ``+ - * /`` with two ``operands``,
    ``neg`` or ``sqrt`` with one).  Arithmetic is evaluated where the argument is used -- inline in
    each kernel that reads it, on the device -- so a scalar computed from reductions never makes a
    round trip to the host."""
    value: Value | None
    literal: float | None = None
    negate: bool = False
    op: str | None = None
    operands: tuple["ScalarArg", ...] = ()

    def values(self) -> tuple[Value, ...]:
        """The scalar values this argument reads, each once, in order of appearance."""
        if self.op is None:
            return () if self.value is None else (self.value,)
        out: dict[int, Value] = {}
        for o in self.operands:
            for v in o.values():
                out.setdefault(v.id, v)
        return tuple(out.values())

    def reads(self, v: Value) -> bool:
        return any(u is v for u in self.values())

    def text(self) -> str:
        """Script syntax (parsed back to the same argument)."""
        return self._text(0)

    def _text(self, outer: int) -> str:
        if self.op is None:
            if self.value is None:
                return repr(self.literal)
            return ("-" if self.negate else "") + self.value.name
        if self.op == "sqrt":
            return f"sqrt({self.operands[0]._text(0)})"
        if self.op == "neg":
            return "-" + self.operands[0]._text(3)
        prec = _PRECEDENCE[self.op]
        left, right = self.operands
        text = f"{left._text(prec)} {self.op} {right._text(prec + 1)}"
        return f"({text})" if prec < outer else text

    def c_expr(self, leaf) -> str:
        """C text, with ``leaf(arg)`` the text of a value or literal leaf."""
        if self.op is None:
            return leaf(self)
        if self.op == "sqrt":
            return f"sqrt({self.operands[0].c_expr(leaf)})"
        if self.op == "neg":
            return f"(-{self.operands[0].c_expr(leaf)})"
        left, right = self.operands
        return f"({left.c_expr(leaf)} {self.op} {right.c_expr(leaf)})"

    def evaluate(self, read, magnitude: bool = False) -> float:
        """The value, with ``read(value)`` the number of a scalar value; ``magnitude``: of the
        magnitudes of the terms (leaves and sums taken absolute), for error bounds."""
        if self.op is None:
            x = self.literal if self.value is None else read(self.value)
            assert x is not None                    # a leaf is a literal or a value
            x = -x if self.negate else x
            return abs(x) if magnitude else x
        xs = [o.evaluate(read, magnitude) for o in self.operands]
        if self.op == "neg":
            return xs[0] if magnitude else -xs[0]
        if self.op == "sqrt":
            x = abs(xs[0]) if magnitude else xs[0]
            return math.sqrt(x) if x >= 0 else math.nan
        a, b = xs
        if self.op == "+":
            return a + b
        if self.op == "-":
            return a + b if magnitude else a - b
        if self.op == "*":
            return a * b
        return a / b

    def remap(self, f) -> "ScalarArg":
        """The same argument with every value ``v`` replaced by ``f(v)``."""
        if self.op is None:
            return self if self.value is None else ScalarArg(f(self.value), self.literal, self.negate)
        return ScalarArg(None, op=self.op, operands=tuple(o.remap(f) for o in self.operands))


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


SIZE_WORDS = {0: (), 1: ("len",), 2: ("rows", "cols")}   # automatic size names by rank: x.len, A.rows


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
        return tuple(c for c in self.calls if any(a is v or (isinstance(a, ScalarArg) and a.reads(v))
                                                  for a in c.args))

    def device_scalars(self) -> frozenset[str]:
        """Names of the scalar inputs bound to 0-d device arrays (passed by address)."""
        return frozenset(v.name for v in self.inputs if v.on_device)

    def with_device_scalars(self, names) -> "Program":
        """This program with the scalar inputs ``names`` (and no others) bound to 0-d device arrays:
        kernels read them by address, so a scalar an earlier call left on the GPU is used
        without a round trip through the host."""
        names = frozenset(names)
        if names == self.device_scalars():
            return self
        scalars = {v.name for v in self.inputs if v.type == "scalar"}
        if names - scalars:
            raise ValueError(f"not scalar inputs: {', '.join(sorted(names - scalars))}")
        values = tuple(replace(v, on_device=v.name in names) if v.is_input and v.type == "scalar" else v
                       for v in self.values)

        def arg(a):
            return values[a.id] if isinstance(a, Value) else a.remap(lambda v: values[v.id])

        calls = tuple(replace(c, args=tuple(arg(a) for a in c.args),
                              outputs=tuple(values[v.id] for v in c.outputs)) for c in self.calls)
        return replace(self, values=values, inputs=tuple(values[v.id] for v in self.inputs),
                       outputs=tuple(values[v.id] for v in self.outputs), calls=calls)
