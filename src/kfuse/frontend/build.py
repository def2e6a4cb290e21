"""The program IR built from statements: the meaning of declarations, inputs, calls, scalar
arithmetic and the return statement, shared by the two front ends.

The script parser (``frontend/parser.py``) reads the syntax and hands each statement to a
:class:`ProgramBuilder`; the jit's lowering (``frontend/lowered.py``) hands it the statements it
chose for a traced function.  Either way the same checks run and the same :class:`Program` comes
out.  Names and function names arrive as tokens (anything with ``text`` and ``line``), scalar
expressions as nodes: ``("num", tok)``, ``("name", tok)``, ``("neg", tok, node)``,
``("sqrt", tok, node)`` or ``(op, tok, left, right)`` with op one of ``+ - * /``, ``tok`` where
the node starts.  An error is made by :meth:`ProgramBuilder.error` from the token it concerns:
the parser names the script's line and column, the jit the user's line.
"""
from __future__ import annotations

import difflib
import math
import re
from typing import Protocol

from ..errors import KfuseError
from ..library.schema import AXES, Function, Library
from ..ir.program import SIZE_WORDS, Call, Dim, Program, ScalarArg, Value

from ..library import ewexpr, synth
from .ewbuild import SCALAR_OPS, ElementwiseStatements, walk

ELEMENTWISE_NAMES = (*ewexpr.FUNCTIONS, *synth.REDUCTIONS, *synth.AXIS_SUMS)   # expression statements' names
RANKS = {"scalar": 0, "vector": 1, "matrix": 2, "csr": 3}   # csr: rows, cols, non-zeros


class Token(Protocol):
    """What the builder reads of a name's or a function's token: its text and line."""
    @property
    def text(self) -> str: ...
    @property
    def line(self) -> int: ...


def program_name(name: str) -> str:
    """A program's name as kernels and plans show it: a C identifier's characters."""
    return re.sub(r"\W", "_", name) or "script"


class ProgramBuilder(ElementwiseStatements):
    """Statements in, a :class:`Program` out (see the module docstring).  Subclasses say where an
    error is (:meth:`error`).  One method per kind of statement or check the front ends hand it
    (declarations, inputs, calls, scalar arithmetic, returns), hence their number."""

    def __init__(self, library: Library, name: str, file: str, source: str):
        self.lib, self.name, self.file, self.src = library, name, file, source
        self.decls: dict[str, tuple[str, tuple[int, ...], Token]] = {}   # name -> (type, dims, tok)
        self.inputs: dict[str, Token] = {}
        self.current: dict[str, Value] = {}      # name -> latest value
        self.arith: dict[str, ScalarArg] = {}    # scalar name -> its arithmetic, when assigned one last
        self.values: list[Value] = []
        self.labels: set[str] = set()       # labels of the values so far (and their names)
        self.suffix: dict[str, int] = {}    # name -> the next number to try for a label name_N
        self.calls: list[Call] = []
        self.outputs: list[Value] | None = None
        self.returns: tuple[Value | ScalarArg, ...] = ()    # set when the return statement has arithmetic
        self._items: list[Value | ScalarArg] = []           # the return statement so far
        self._outs: list[Value] = []
        self._returned: set[int] = set()                    # ids of the values returned by name
        self._out_by_name: dict[str, Value] = {}            # the outputs so far, by name (one each)
        self.parent: list[int] = []              # union-find over dimension ids
        self.dim_info: list[tuple[str, int | None, bool]] = []   # name, literal, declared
        self.named_dims: dict[str, int] = {}

    def error(self, msg: str, tok: Token) -> KfuseError:
        raise NotImplementedError

    # -- dimensions ----------------------------------------------------------------------
    def new_dim(self, name: str, literal: int | None = None, declared: bool = False) -> int:
        if declared and literal is None and name in self.named_dims:
            return self.named_dims[name]
        d = len(self.parent)
        self.parent.append(d)
        self.dim_info.append((name, literal, declared))
        if declared and literal is None:
            self.named_dims[name] = d
        return d

    def find(self, d: int) -> int:
        while self.parent[d] != d:
            self.parent[d] = self.parent[self.parent[d]]
            d = self.parent[d]
        return d

    def unify(self, a: int, b: int, what: str, tok) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        (na, la, da), (nb, lb, db) = self.dim_info[ra], self.dim_info[rb]
        if la is not None and lb is not None and la != lb:
            raise self.error(f"{what}: sizes {la} and {lb} differ", tok)
        if da and db and la is None and lb is None:
            raise self.error(f"{what}: declared sizes {na} and {nb} must be the same dimension", tok)
        # name the class after the best member: declared > a variable's own size > a call axis,
        # then the earliest created
        if (self.rank(rb), -rb) > (self.rank(ra), -ra):
            ra, rb = rb, ra
            (na, la, da), (nb, lb, db) = (nb, lb, db), (na, la, da)
        self.parent[rb] = ra
        self.dim_info[ra] = (na, la if la is not None else lb, da or db)

    def rank(self, d: int) -> int:
        name, literal, declared = self.dim_info[d]
        return 3 if declared and literal is None else 2 if declared else 1 if "@" not in name else 0

    # -- declarations and inputs -----------------------------------------------------------
    def check_new(self, tok) -> None:
        """``tok`` names nothing declared yet."""
        if tok.text in self.decls:
            prev = self.decls[tok.text][2]
            raise self.error(f"{tok.text} is already declared (line {prev.line})", tok)

    def declare(self, tok, vtype: str, dims: list[int] | None = None) -> None:
        """Declare ``tok``'s name a ``vtype`` of sizes ``dims`` (dimension ids), or of sizes of
        its own (``x.len``, ``A.rows``, ``A.cols``)."""
        self.check_new(tok)
        if dims is None:
            dims = [self.new_dim(f"{tok.text}.{s}") for s in SIZE_WORDS[RANKS[vtype]]]
        self.decls[tok.text] = (vtype, tuple(dims), tok)

    def lookup_decl(self, tok):
        if tok.text not in self.decls:
            close = difflib.get_close_matches(tok.text, list(self.decls), 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise self.error(f"{tok.text} is not declared{hint}", tok)
        return self.decls[tok.text]

    def input(self, tok) -> None:
        vtype, dims, _ = self.lookup_decl(tok)
        if tok.text in self.inputs:
            raise self.error(f"{tok.text} is already an input", tok)
        if tok.text in self.current:
            raise self.error(f"{tok.text} is assigned before it is declared an input", tok)
        self.inputs[tok.text] = tok
        v = Value(len(self.values), tok.text, tok.text, vtype, dims, is_input=True)
        self.values.append(v)
        self.labels.add(v.label)
        self.current[tok.text] = v

    # -- the return statement ---------------------------------------------------------------
    def return_item(self, node: tuple) -> None:
        """One returned item: a value by name, or scalar arithmetic (computed after the plan by
        one small kernel), whose computed scalars become outputs too: outputs are known by name,
        so one each."""
        items, outs = self._items, self._outs
        tok = node[1]
        if node[0] == "name" and tok.text not in self.arith:
            self.lookup_decl(tok)
            if tok.text in self.current and self.current[tok.text].is_input:
                raise self.error(f"{tok.text} is an input; return values the script computes", tok)
            if tok.text not in self.current:
                raise self.error(f"{tok.text} is returned but never assigned", tok)
            if self.current[tok.text].id in self._returned:
                raise self.error(f"{tok.text} is returned twice", tok)
            self._returned.add(self.current[tok.text].id)
            items.append(self.current[tok.text])
            reads = [self.current[tok.text]]
        else:
            bad = next((n for n in walk(node) if n[0] not in SCALAR_OPS), None)
            if bad is not None:
                raise self.error("a return statement returns names and scalar arithmetic; assign "
                                 f"{'the call' if bad[0] in ('call', 'libcall') else 'the expression'} to a name "
                                 "first and return the name", bad[1])
            arg = self.scalar(node)
            items.append(arg)
            reads = [v for v in arg.values() if not v.is_input]
        for v in reads:
            other = self._out_by_name.get(v.name)
            if other is not None and other.id == v.id:
                continue                                  # already an output
            if other is not None:
                same = sorted([other, v], key=lambda o: o.id)
                lines = [next(c.line for c in self.calls if o in c.outputs) for o in same]
                raise self.error(f"the returned values read two values named {v.name}: the one assigned on line "
                                 f"{lines[0]} and the one assigned on line {lines[1]}; outputs are known by name: "
                                 "assign one of them to another name", tok)
            self._out_by_name[v.name] = v
            outs.append(v)

    def end_return(self, ret) -> None:
        """The return statement (``ret``, its keyword) is complete."""
        if not self._outs:
            raise self.error("the script returns nothing its calls compute (return a value a call assigns, "
                             "or arithmetic that reads one)", ret)
        self.outputs = self._outs
        if any(isinstance(r, ScalarArg) for r in self._items):
            self.returns = tuple(self._items)

    # -- scalar expressions ------------------------------------------------------------------
    def scalar(self, root: tuple) -> ScalarArg:
        """A scalar expression node as a ScalarArg (names looked up, types checked), by an
        explicit stack (no recursion)."""
        done: dict[int, ScalarArg] = {}
        stack = [(root, False)]
        while stack:
            node, ready = stack.pop()
            kids = node[2:]
            if not ready and kids:
                stack.append((node, True))
                stack.extend((k, False) for k in reversed(kids))
                continue
            done[id(node)] = self.scalar_node(node, [done.pop(id(k)) for k in kids])
        return done[id(root)]

    def scalar_node(self, node: tuple, operands: list[ScalarArg]) -> ScalarArg:
        """One node of a scalar expression, its operands already made."""
        kind, tok = node[0], node[1]
        if kind == "num":
            value = float(tok.text)
            if not math.isfinite(value):
                raise self.error(f"the number {tok.text:.40} is too large (not a finite double)", tok)
            return ScalarArg(None, value)
        if kind == "name":
            self.lookup_decl(tok)
            if tok.text in self.arith:
                return self.arith[tok.text]
            if tok.text not in self.current:
                raise self.error(f"{tok.text} is used before it is assigned", tok)
            v = self.current[tok.text]
            if v.type != "scalar":
                raise self.error(f"{tok.text} is a {v.type}; scalar arithmetic takes scalars", tok)
            return ScalarArg(v)
        if kind == "neg":
            inner = operands[0]
            if inner.op is None:            # -name, -number: the plain forms
                if inner.value is None:
                    assert inner.literal is not None
                    return ScalarArg(None, -inner.literal)
                return ScalarArg(inner.value, negate=not inner.negate)
            return ScalarArg(None, op="neg", operands=(inner,))
        if kind == "sqrt":
            return ScalarArg(None, op="sqrt", operands=(operands[0],))
        left, right = operands
        if kind == "/" and right.op is None and right.value is None and right.literal == 0:
            raise self.error("division by zero", node[3][1])
        return ScalarArg(None, op=kind, operands=(left, right))

    def scalar_assignment(self, target, node: tuple) -> None:
        self.arith[target.text] = self.scalar(node)
        self.current.pop(target.text, None)

    # -- calls ----------------------------------------------------------------------------
    def call(self, targets: list, fn_tok, args: list[tuple], function: Function | None = None) -> None:
        """``targets = fn_tok(args)``: a call of a library function by name or alias (the first
        overload that takes as many arguments), or of ``function`` (a synthesized one:
        ``frontend/ewbuild.py``); ``fn_tok.line`` is the call's line."""
        overloads = (function,) if function is not None else self.lib.overloads(fn_tok.text)
        if not overloads:
            names = sorted({n for f in self.lib.functions for n in (f.name, *f.aliases)} | set(ELEMENTWISE_NAMES))
            close = difflib.get_close_matches(fn_tok.text, names, 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise self.error(f"unknown function {fn_tok.text}{hint}", fn_tok)
        fn = next((f for f in overloads if len(f.inputs) == len(args)), None)
        if fn is None:
            sigs = "; ".join(f.signature for f in overloads)
            raise self.error(f"{fn_tok.text} takes {' or '.join(str(len(f.inputs)) for f in overloads)} "
                             f"arguments, {len(args)} given ({sigs})", fn_tok)
        if len(targets) != len(fn.outputs):
            raise self.error(f"{fn.name} returns {len(fn.outputs)} value(s), {len(targets)} assigned",
                             targets[0])
        # arguments
        call_args: list[Value | ScalarArg] = []
        axes = [self.new_dim(f"{fn.name}@{fn_tok.line}.{a}") for a in AXES[fn.nesting]]
        axis_of = dict(zip(AXES[fn.nesting], axes))
        for n, (p, node) in enumerate(zip(fn.inputs, args), 1):
            what = f"argument {n} ({p.name}) of {fn.name}"
            tok = node[1]
            if p.type == "scalar":
                if node[0] == "name" and tok.text in self.current and self.current[tok.text].type != "scalar":
                    raise self.error(f"{what} must be a scalar, {tok.text} is a {self.current[tok.text].type}", tok)
                call_args.append(self.scalar(node))
                continue
            if node[0] == "num":
                raise self.error(f"{what} must be a {p.type}, got the number {tok.text}", tok)
            if node[0] == "neg" and node[2][0] == "name":
                tok = node[2][1]
                self.lookup_decl(tok)
                if tok.text in self.current and self.current[tok.text].type != "scalar":
                    raise self.error(f"only scalars can be negated; {tok.text} is a {self.current[tok.text].type}", tok)
            if node[0] != "name":
                raise self.error(f"{what} must be a {p.type} name (arithmetic applies to scalars only)", tok)
            vtype, dims, _ = self.lookup_decl(tok)
            if tok.text in self.arith:
                raise self.error(f"{what} must be a {p.type}, {tok.text} is a scalar", tok)
            if tok.text not in self.current:
                raise self.error(f"{tok.text} is used before it is assigned", tok)
            v = self.current[tok.text]
            if v.type != p.type:
                raise self.error(f"{what} must be a {p.type}, {tok.text} is a {v.type}", tok)
            for d, a in zip(v.dims, p.index):
                self.unify(axis_of[a], d, f"{what} {tok.text}: size does not match the other arguments", tok)
            call_args.append(v)
        # inputs that follow no axis (a gathered x of a sparse mat-vec) take other params' sizes
        by_name = {p.name: a for p, a in zip(fn.inputs, call_args)}
        for n, (p, arg) in enumerate(zip(fn.inputs, call_args), 1):
            if not isinstance(arg, Value):
                continue
            for d, ref in zip(arg.dims, p.size):
                other, word = ref.split(".")
                src = by_name[other]
                assert isinstance(src, Value)
                k = SIZE_WORDS[RANKS[src.type]].index(word)
                self.unify(src.dims[k], d, f"argument {n} ({p.name}) of {fn.name} {arg.name}: its size must be "
                           f"{src.name}'s {'length' if word == 'len' else word}", args[n - 1][1])
        if fn.triangle:     # its tiles lie on or above the diagonal: rows and columns are one dimension
            self.unify(axis_of["i"], axis_of["j"], f"{fn.name} reads a triangle of a square matrix", fn_tok)
        # outputs
        outs = []
        for tok, p in zip(targets, fn.outputs):
            vtype, dims, _ = self.lookup_decl(tok)
            if vtype != p.type:
                raise self.error(f"{fn.name} returns a {p.type} as {p.name}, {tok.text} is a {vtype}", tok)
            for d, a in zip(dims, p.index):
                self.unify(axis_of[a], d, f"{tok.text}: size does not match the result of {fn.name}", tok)
            label = tok.text
            if tok.text in self.labels:         # a value of this name exists (labels include names)
                n = self.suffix.get(tok.text, 2)    # the numbers below it are taken: no rescan
                while f"{tok.text}_{n}" in self.labels or f"{tok.text}_{n}" in self.decls:
                    n += 1
                label, self.suffix[tok.text] = f"{tok.text}_{n}", n + 1
            v = Value(len(self.values), tok.text, label, vtype, dims)
            self.values.append(v)
            self.labels.add(label)
            outs.append(v)
        for tok, v in zip(targets, outs):
            self.current[tok.text] = v
            self.arith.pop(tok.text, None)
        if len({t.text for t in targets}) != len(targets):
            raise self.error("the same name is assigned twice in one statement", targets[0])
        self.calls.append(Call(len(self.calls), fn, tuple(call_args), tuple(outs), fn_tok.line,
                               tuple(axes)))

    # -- the program ------------------------------------------------------------------------
    def finish(self) -> Program:
        """The program: dimensions unified into classes, values and calls in their terms."""
        # the sizes of values and calls; a declaration never used has none (nothing could give it)
        used = {d for v in self.values for d in v.dims} | {d for c in self.calls for d in c.axes}
        roots = sorted({self.find(d) for d in used})
        cls = {r: n for n, r in enumerate(roots)}
        dims = tuple(Dim(cls[r], self.dim_info[r][0], self.dim_info[r][1]) for r in roots)
        dim_of = {d: cls[self.find(d)] for d in range(len(self.parent)) if self.find(d) in cls}

        def canon(v: Value) -> Value:
            return Value(v.id, v.name, v.label, v.type, tuple(dim_of[d] for d in v.dims), v.is_input)

        values = tuple(canon(v) for v in self.values)
        calls = tuple(Call(c.index, c.function,
                           tuple(values[a.id] if isinstance(a, Value) else a.remap(lambda v: values[v.id])
                                 for a in c.args),
                           tuple(values[v.id] for v in c.outputs), c.line,
                           tuple(dim_of[d] for d in c.axes)) for c in self.calls)
        assert self.outputs is not None         # a program returns (the front ends check)
        memo: dict = {}         # operands the returned arithmetic shares stay shared
        returns = tuple(values[r.id] if isinstance(r, Value) else r.remap(lambda v: values[v.id], memo)
                        for r in self.returns)
        return Program(self.name, self.src, self.file, values, tuple(v for v in values if v.is_input),
                       tuple(values[v.id] for v in self.outputs), calls, dims, self.lib.digest,
                       dim_of={d: d for d in range(len(dims))}, returns=returns)
