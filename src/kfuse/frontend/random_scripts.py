"""Seeded random scripts over any library: the yardstick for plans, predictions and the planner's
scale (``kfuse report --random``, tests).

A script mixes what users write: chains (a call consuming the last result), shared inputs, several
outputs, reductions whose scalar results feed later calls, vector and matrix calls mixed (matrices
square, so every size is one name), names reassigned, scalar arguments as literals, input names
and negated names.  Every generated script is valid: it parses, and every value it computes is
used or returned.

``extras`` adds statements of other kinds, between the library calls (a seed's script without
extras is the one it always was: tests and published results name seeds): ``"ew"`` elementwise
expressions (maps of vectors and scalars, reductions into scalars, a matrix map with a broadcast
vector), ``"arith"`` scalar arithmetic assigned and returned, ``"csr"`` sparse mat-vecs with a
csr input, ``"grid"`` stencils (vector-only scripts: the one vector size is the grid).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..library.schema import Function, Library

LITERALS = ("0.5", "2.0", "-1.25", "3.0", "0.75", "-0.5")
EXTRAS = frozenset({"ew", "arith", "csr", "grid"})
_UNARY = ("abs", "sqrt", "exp", "tanh", "sin", "cos", "sigmoid")


@dataclass(frozen=True)
class RandomScript:
    seed: int
    text: str
    calls: int
    matrix: bool                    # the script has matrices (size n) or only vectors (size N)


def _usable(lib: Library, matrix: bool, functions: frozenset[str] | None = None) -> list[Function]:
    """Functions a script of this class can call: every array param is a vector or a square matrix
    of the script's one size; vector-only scripts call no matrix function (``functions``: only
    those of these names).  Stencils are left out: they need their vectors' grid shape, which the
    arrays of a call give and a random script's flat vectors do not."""
    out = []
    for f in lib.functions:
        if f.grid or (functions is not None and f.name not in functions):
            continue
        types = {p.type for p in f.params}
        if (not matrix and "matrix" in types) or "csr" in types:    # no sparse inputs in random scripts
            continue
        out.append(f)
    return out


class _Builder:
    def __init__(self, lib: Library, rng: random.Random, matrix: bool, functions: frozenset[str] | None = None,
                 extras: frozenset[str] = frozenset()):
        self.lib, self.rng, self.matrix = lib, rng, matrix
        self.funcs = _usable(lib, matrix, functions)
        self.extras = extras - ({"grid"} if matrix else set())      # a grid is the one vector size
        self.arith: set[str] = set()          # scalar names assigned arithmetic (no value of their own)
        self.kept: set[str] = set()           # names arithmetic reads: never reassigned (it would read two values)
        self.stencils = [f.name for f in lib.functions if f.grid and "grid" in self.extras]
        if matrix and not any("matrix" in {p.type for p in f.params} for f in self.funcs):
            raise ValueError("the library has no function on matrices")
        self.inputs: dict[str, str] = {}      # name -> type
        self.computed: dict[str, str] = {}    # name -> type (current binding of the name)
        self.order: list[str] = []            # computed names, newest last
        self.used: set[str] = set()
        self.lines: list[str] = []
        self.counter = {"scalar": 0, "vector": 0, "matrix": 0}

    def fresh(self, type_: str, input_: bool) -> str:
        prefix = {"scalar": "s", "vector": "v", "matrix": "M", "csr": "S"}[type_]
        if input_:
            prefix = {"scalar": "a", "vector": "x", "matrix": "A", "csr": "S"}[type_]
        self.counter.setdefault(type_, 0)
        self.counter[type_] += 1
        return f"{prefix}{self.counter[type_]}"

    def new_input(self, type_: str) -> str:
        name = self.fresh(type_, True)
        self.inputs[name] = type_
        return name

    def pick(self, type_: str) -> str:
        """An existing value of the type (newest computed ones preferred: chains), or a new input."""
        r = self.rng
        computed = [n for n in self.order if self.computed.get(n) == type_]
        inputs = [n for n, t in self.inputs.items() if t == type_]
        if computed and r.random() < 0.6:
            return computed[-1] if r.random() < 0.6 else r.choice(computed)
        if inputs and r.random() < 0.6:
            return r.choice(inputs)
        return self.new_input(type_)

    def scalar_arg(self) -> str:
        r = self.rng
        computed = [n for n in self.order if self.computed.get(n) == "scalar"]
        roll = r.random()
        if computed and roll < 0.35:
            name = r.choice(computed)
            self.used.add(name)
            return name
        if roll < 0.6:
            return r.choice(LITERALS)
        name = r.choice([n for n, t in self.inputs.items() if t == "scalar"] or [self.new_input("scalar")])
        return f"-{name}" if r.random() < 0.3 else name

    def statement(self) -> None:
        """A library call, or with ``extras`` (one draw in three) a statement of one of them."""
        r = self.rng
        if self.extras and r.random() < 0.35:
            kind = r.choice(sorted(self.extras))
            if kind == "ew":
                self.elementwise()
            elif kind == "arith" and any(self.computed.get(n) == "scalar" for n in self.order):
                self.arithmetic()
            elif kind == "csr":
                self.emit("vector", f"spmv({self.pick('csr')}, {self.use(self.pick('vector'))})")
            elif kind == "grid":
                name = r.choice(self.stencils)
                f = next(g for g in self.lib.functions if g.name == name)
                self.emit("vector", f"{f.name}({', '.join(self.use(self.pick('vector')) for _ in f.inputs)})")
            else:
                self.call()
            return
        self.call()

    def use(self, name: str) -> str:
        self.used.add(name)
        return name

    def emit(self, type_: str, rhs: str) -> None:
        """``<new name> = rhs;`` (a name reassigned as ``call`` does)."""
        reusable = [n for n in self.order if self.computed[n] == type_ and n in self.used
                    and n not in self.arith | self.kept and n not in rhs.replace("(", " ").replace(",", " ").split()]
        name = self.rng.choice(reusable) if reusable and self.rng.random() < 0.25 else self.fresh(type_, False)
        if name in self.order:
            self.order.remove(name)
        self.computed[name] = type_
        self.order.append(name)
        self.used.discard(name)
        self.lines.append(f"{name} = {rhs};")

    def vector_expr(self, depth: int = 0) -> str:
        """An elementwise expression over vectors (one at least) and scalars."""
        r = self.rng
        roll = r.random()
        if depth >= 2 or roll < 0.35:
            return self.use(self.pick("vector"))
        a = self.vector_expr(depth + 1)
        if roll < 0.6:
            b = self.vector_expr(depth + 1) if r.random() < 0.6 else self.scalar_arg().lstrip("-")
            return f"({a} {r.choice('+-*')} {b})"
        if roll < 0.8:
            return f"{r.choice(_UNARY)}({a})"
        if roll < 0.9:
            return f"{r.choice(('maximum', 'minimum'))}({a}, {self.vector_expr(depth + 1)})"
        return f"where({a} > {self.vector_expr(depth + 1)}, {a}, {r.choice(LITERALS)})"

    def elementwise(self) -> None:
        r = self.rng
        roll = r.random()
        if self.matrix and roll < 0.25:
            A, v = self.use(self.pick("matrix")), self.use(self.pick("vector"))
            self.emit("matrix", f"{A} * {v}[{r.choice((':, None', 'None, :'))}] + {r.choice(LITERALS)} * {A}")
        elif roll < 0.55:
            self.emit("scalar", f"{r.choice(('sum', 'max', 'min', 'mean'))}({self.vector_expr()})")
        else:
            self.emit("vector", self.vector_expr())

    def arithmetic(self) -> None:
        """``t<k> = <arithmetic of a computed scalar>``: no value of its own, read as one."""
        r = self.rng
        a = self.use(r.choice([n for n in self.order if self.computed.get(n) == "scalar"]))
        self.kept.add(a)
        rhs = r.choice((f"{a} / {self.scalar_arg()}", f"sqrt({a}) * 2",
                        f"({a} + {self.scalar_arg()}) * 0.5", f"-{a}"))
        name = self.fresh("scalar", False).replace("s", "t", 1)
        self.computed[name] = "scalar"
        self.order.append(name)
        self.arith.add(name)
        self.used.add(name)                   # arithmetic unused is no computed value left over
        self.lines.append(f"{name} = {rhs};")

    def call(self) -> None:
        r = self.rng
        f = r.choice(self.funcs)
        if self.matrix and not any(p.type == "matrix" for p in f.params) and r.random() < 0.3:
            f = r.choice([g for g in self.funcs if any(p.type == "matrix" for p in g.params)])
        args = []
        for p in f.inputs:
            if p.type == "scalar":
                args.append(self.scalar_arg())
            else:
                name = self.pick(p.type)
                self.used.add(name)
                args.append(name)
        out = f.outputs[0]
        reusable = [n for n in self.order if self.computed[n] == out.type and n in self.used and n not in args]
        if self.extras:
            reusable = [n for n in reusable if n not in self.arith | self.kept]
        name = r.choice(reusable) if reusable and r.random() < 0.25 else self.fresh(out.type, False)
        if name in self.order:
            self.order.remove(name)
        self.computed[name] = out.type
        self.order.append(name)
        self.used.discard(name)
        self.lines.append(f"{name} = {f.name}({', '.join(args)});")

    def text(self, seed: int) -> str:
        r = self.rng
        values = [n for n in self.order if n not in self.arith]
        unused = [n for n in values if n not in self.used]
        extra = [n for n in values if n in self.used and r.random() < 0.2]
        returned = list(dict.fromkeys(unused + extra)) or [values[-1]]
        if "arith" in self.extras:
            scalars = [n for n in self.order if self.computed[n] == "scalar"]
            if scalars and r.random() < 0.5:
                a = r.choice(scalars)
                returned.append(r.choice((f"sqrt({a})", f"{a} / 3", f"{a} * {a} - 1")))
        names = {**self.inputs, **self.computed}
        decl = []
        for t in ("scalar", "vector", "matrix", "csr"):
            ns = [n for n, tt in names.items() if tt == t]
            if ns:
                decl.append(f"{t} {', '.join(ns)};")
        head = [f"# random script, seed {seed} ({'matrices and vectors' if self.matrix else 'vectors'})"]
        return "\n".join(head + decl + [f"input {', '.join(self.inputs)};"] + self.lines
                         + [f"return {', '.join(returned)};"]) + "\n"


def random_script(lib: Library, seed: int, calls: int | None = None, min_calls: int = 2,
                  max_calls: int = 10, matrix: bool | None = None,
                  functions: frozenset[str] | None = None, extras: frozenset[str] = frozenset()) -> RandomScript:
    """The script of ``seed``: ``calls`` statements (default: between ``min_calls`` and
    ``max_calls``), with matrices or not (default: drawn), calling the library's functions
    (``functions``: only those of these names -- a seed then gives the script it gave before
    functions were added); ``extras`` (some of ``EXTRAS``) mixes in statements of those kinds."""
    unknown = set(extras) - EXTRAS
    if unknown:
        raise ValueError(f"unknown extras {sorted(unknown)}: the kinds are {sorted(EXTRAS)}")
    rng = random.Random(seed)
    n = calls if calls is not None else rng.randint(min_calls, max_calls)
    if n < 1:
        raise ValueError("a script needs at least one call")
    has_matrix_fn = any(p.type == "matrix" for f in lib.functions for p in f.params
                        if functions is None or f.name in functions)
    m = (rng.random() < 0.6 and has_matrix_fn) if matrix is None else matrix
    b = _Builder(lib, rng, m, functions, frozenset(extras))
    for _ in range(n):
        b.statement()
    return RandomScript(seed, b.text(seed), n, m)
