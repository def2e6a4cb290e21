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
from .dag import post_order


@dataclass(frozen=True)
class Value:
    id: int
    name: str                   # script name (several values may share one after reassignment)
    label: str                  # unique, C-identifier-safe: the name, or name_2, name_3 ...
    type: str                   # scalar | vector | matrix | csr
    dims: tuple[int, ...]       # dimension ids (vector: 1, matrix: rows, cols; csr: rows, cols,
                                # non-zeros; scalar: none)
    is_input: bool = False
    on_device: bool = False     # a scalar input bound to a 0-d device array: passed by address


SCALAR_BINARY = ("+", "-", "*", "/")
SCALAR_UNARY = ("neg", "sqrt")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


@dataclass(frozen=True, eq=False)
class ScalarArg:
    """A scalar argument: a scalar value (an input, or a scalar an earlier call computed), maybe
    negated; a literal; or arithmetic over such (``op`` one of ``+ - * /`` with two ``operands``,
    ``neg`` or ``sqrt`` with one).  Arithmetic is evaluated where the argument is used -- inline in
    each kernel that reads it, on the device -- so a scalar computed from reductions never makes a
    round trip to the host.

    Operands may be shared (``b = a * a; c = b * b;``): the arithmetic is a DAG, and every walk
    over it (values, evaluation, remapping, C text, equality) visits each distinct node once, in a
    loop rather than by recursion, so neither a long chain nor repeated sharing costs more than
    the number of distinct nodes."""
    value: Value | None
    literal: float | None = None
    negate: bool = False
    op: str | None = None
    operands: tuple["ScalarArg", ...] = ()

    @cached_property
    def _nodes(self) -> tuple["ScalarArg", ...]:
        """The distinct nodes of this argument, operands before the nodes that use them, leaves
        in order of first appearance (left to right)."""
        return tuple(post_order([self], lambda n: n.operands))

    def nodes(self) -> tuple["ScalarArg", ...]:
        """The distinct nodes, operands before the nodes that use them (this one last)."""
        return self._nodes

    def values(self) -> tuple[Value, ...]:
        """The scalar values this argument reads, each once, in order of appearance."""
        out: dict[int, Value] = {}
        for n in self._nodes:
            if n.op is None and n.value is not None:
                out.setdefault(n.value.id, n.value)
        return tuple(out.values())

    def reads(self, v: Value) -> bool:
        return any(u is v for u in self.values())

    def text(self, limit: int | None = None) -> str:
        """Script syntax (parsed back to the same argument).  With ``limit``, a subexpression
        longer than that many characters is cut short with an ellipsis (for messages and
        comments: shared subexpressions written out in full can grow exponentially)."""
        text: dict[int, str] = {}

        def sub(o: ScalarArg, outer: int) -> str:
            t = text[id(o)]
            return f"({t})" if o.op in _PRECEDENCE and _PRECEDENCE[o.op] < outer else t

        for n in self._nodes:
            if n.op is None:
                t = repr(n.literal) if n.value is None else ("-" if n.negate else "") + n.value.name
            elif n.op == "sqrt":
                t = f"sqrt({sub(n.operands[0], 0)})"
            elif n.op == "neg":
                t = "-" + sub(n.operands[0], 3)
            else:
                prec = _PRECEDENCE[n.op]
                t = f"{sub(n.operands[0], prec)} {n.op} {sub(n.operands[1], prec + 1)}"
            if limit is not None and len(t) > limit:
                t = t[:limit] + "..."
            text[id(n)] = t
        return text[id(self)]

    def c_code(self, leaf, prefix: str = "kf_t") -> tuple[list[str], str]:
        """(declarations, expression): C text, with ``leaf(arg)`` the text of a value or literal
        leaf.  Arithmetic used more than once in this argument is computed once, into a
        ``const real`` named ``prefix`` and a number that the declarations define."""
        uses: dict[int, int] = {}
        for n in self._nodes:
            for o in n.operands:
                uses[id(o)] = uses.get(id(o), 0) + 1
        decls: list[str] = []
        text: dict[int, str] = {}
        for n in self._nodes:
            if n.op is None:
                t = leaf(n)
            elif n.op == "sqrt":
                t = f"sqrt({text[id(n.operands[0])]})"
            elif n.op == "neg":
                t = f"(-{text[id(n.operands[0])]})"
            else:
                t = f"({text[id(n.operands[0])]} {n.op} {text[id(n.operands[1])]})"
            if n.op is not None and uses.get(id(n), 0) > 1:
                name = f"{prefix}{len(decls)}"
                decls.append(f"const real {name} = {t};")
                t = name
            text[id(n)] = t
        return decls, text[id(self)]

    def evaluate(self, read, magnitude: bool = False) -> float:
        """The value, with ``read(value)`` the number of a scalar value; ``magnitude``: of the
        magnitudes of the terms (leaves and sums taken absolute), for error bounds."""
        out: dict[int, float] = {}
        for n in self._nodes:
            if n.op is None:
                x = n.literal if n.value is None else read(n.value)
                assert x is not None                    # a leaf is a literal or a value
                x = -x if n.negate else x
                out[id(n)] = abs(x) if magnitude else x
                continue
            xs = [out[id(o)] for o in n.operands]
            if n.op == "neg":
                r = xs[0] if magnitude else -xs[0]
            elif n.op == "sqrt":
                x = abs(xs[0]) if magnitude else xs[0]
                r = math.sqrt(x) if x >= 0 else math.nan
            else:
                a, b = xs
                r = (a + b if n.op == "+" or (n.op == "-" and magnitude) else a - b if n.op == "-"
                     else a * b if n.op == "*" else _divide(a, b))
            out[id(n)] = r
        return out[id(self)]

    def remap(self, f, memo: dict | None = None) -> "ScalarArg":
        """The same argument with every value ``v`` replaced by ``f(v)`` (shared operands stay
        shared; with one ``memo`` for several arguments, operands they share too)."""
        out: dict[int, ScalarArg] = {} if memo is None else memo
        for n in self._nodes:
            if id(n) in out:
                continue
            if n.op is None:
                out[id(n)] = n if n.value is None else ScalarArg(f(n.value), n.literal, n.negate)
            else:
                out[id(n)] = ScalarArg(None, op=n.op, operands=tuple(out[id(o)] for o in n.operands))
        return out[id(self)]

    def _key(self, n: "ScalarArg", children) -> tuple:
        return (n.value, n.literal, n.negate, n.op, children)

    def __hash__(self) -> int:
        h: dict[int, int] = {}
        for n in self._nodes:
            h[id(n)] = hash(self._key(n, tuple(h[id(o)] for o in n.operands)))
        return h[id(self)]

    def __eq__(self, other: object) -> bool:
        """Equal when the same arithmetic over the same values and literals (sharing aside)."""
        if not isinstance(other, ScalarArg):
            return NotImplemented
        stack, seen = [(self, other)], set()
        while stack:
            a, b = stack.pop()
            if a is b or (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
            if self._key(a, len(a.operands)) != self._key(b, len(b.operands)):
                return False
            stack.extend(zip(a.operands, b.operands))
        return True


def _divide(a: float, b: float) -> float:
    """a / b as the device computes it (IEEE: infinities and NaN rather than an exception)."""
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _remapped(items, f) -> tuple:
    """Returned items (values and arithmetic) with every value ``v`` replaced by ``f(v)``;
    operands the arithmetic shares stay shared across the items."""
    memo: dict = {}
    return tuple(r.remap(f, memo) if isinstance(r, ScalarArg) else f(r) for r in items)


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
        args = ", ".join(a.text(limit=120) if isinstance(a, ScalarArg) else a.name for a in self.args)
        return f"{', '.join(v.name for v in self.outputs)} = {self.function.name}({args})"


SIZE_WORDS = {0: (), 1: ("len",), 2: ("rows", "cols"), 3: ("rows", "cols", "nnz")}   # automatic size names
                                            # by rank: x.len, A.rows; a csr matrix's A.nnz its non-zeros


def entries(v: Value, dims: Mapping[int, int]) -> int:
    """Entries of a value at sizes ``dims``: the product of its sizes; for a csr matrix (rows,
    cols, nnz) what its three arrays hold counted in entries of the element type (values and
    column indices per non-zero, a row pointer per row), which is what the transfer model moves."""
    if v.type == "csr":
        rows, _, nnz = (dims[d] for d in v.dims)
        return 2 * nnz + rows + 1
    n = 1
    for d in v.dims:
        n *= dims[d]
    return n


def entries_of(program: "Program", dims: Mapping[int, int]) -> dict[int, int]:
    """Value id -> its entries at sizes ``dims`` (``entries``): what the planner ranks with and
    the benchmarks count bytes and flops by."""
    return {v.id: entries(v, dims) for v in program.values}


def size_class(program: "Program", dims: Mapping[int, int]) -> tuple[int, ...]:
    """Each dimension's size rounded to a power of two (its exponent): the sizes a plan is kept
    for (a compiler session's key, a tuning record's ``sizes``)."""
    return tuple(round(math.log2(max(1, dims[d.id]))) for d in program.dims)


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
    # what a call returns, in the return statement's order, where that is not ``outputs``: values
    # among ``outputs`` and scalar arithmetic (a ``ScalarArg`` over computed scalars and scalar
    # inputs, computed after the plan by one small kernel, codegen/loop/scalars.py).  Empty: the
    # outputs.  ``outputs`` then also holds the computed scalars the arithmetic reads.
    returns: tuple[Value | ScalarArg, ...] = ()

    def dim(self, d: int) -> Dim:
        return self.dims[self.dim_of.get(d, d)]

    def shape_names(self, v: Value) -> tuple[str, ...]:
        return tuple(self.dim(d).name for d in v.dims)

    def producer(self, v: Value) -> Call | None:
        return next((c for c in self.calls if v in c.outputs), None)

    def consumers(self, v: Value) -> tuple[Call, ...]:
        return tuple(c for c in self.calls if any(a is v or (isinstance(a, ScalarArg) and a.reads(v))
                                                  for a in c.args))

    @property
    def returned(self) -> tuple[Value | ScalarArg, ...]:
        """What a call returns, in order: values and scalar arithmetic (``returns``), or the
        outputs."""
        return self.returns or self.outputs

    def returned_arithmetic(self) -> tuple[ScalarArg, ...]:
        """The scalar arithmetic among the returned items, in order (none for most scripts)."""
        return tuple(r for r in self.returns if isinstance(r, ScalarArg))

    def device_scalars(self) -> frozenset[str]:
        """Names of the scalar inputs bound to 0-d device arrays (passed by address)."""
        return frozenset(v.name for v in self.inputs if v.on_device)

    def with_device_scalars(self, names) -> "Program":
        """This program with the scalar inputs ``names`` (and no others) bound to 0-d device arrays:
        kernels read them by address, so a scalar an earlier call left on the GPU is used
        without a round trip through the host.  ``names`` is one name or an iterable of them (a
        str is one name, not its letters); a name that is no scalar input is a KfuseError."""
        from ..errors import KfuseError
        names = frozenset((names,) if isinstance(names, str) else names)
        if names == self.device_scalars():
            return self
        scalars = [v.name for v in self.inputs if v.type == "scalar"]
        for n in sorted(names - set(scalars), key=repr):
            raise KfuseError(f"device_scalars: {n!r} is not a scalar input of the script "
                             f"(its scalar inputs: {', '.join(scalars) or 'none'})")
        values = tuple(replace(v, on_device=v.name in names) if v.is_input and v.type == "scalar" else v
                       for v in self.values)

        def arg(a):
            return values[a.id] if isinstance(a, Value) else a.remap(lambda v: values[v.id])

        calls = tuple(replace(c, args=tuple(arg(a) for a in c.args),
                              outputs=tuple(values[v.id] for v in c.outputs)) for c in self.calls)
        return replace(self, values=values, inputs=tuple(values[v.id] for v in self.inputs),
                       outputs=tuple(values[v.id] for v in self.outputs), calls=calls,
                       returns=_remapped(self.returns, lambda v: values[v.id]))
