"""Seeded random scripts over any library: the yardstick for plans, predictions and the planner's
scale (``kfuse report --random``, tests).

A script mixes what users write: chains (a call consuming the last result), shared inputs, several
outputs, reductions whose scalar results feed later calls, vector and matrix calls mixed (matrices
square, so every size is one name), names reassigned, scalar arguments as literals, input names
and negated names.  Every generated script is valid: it parses, and every value it computes is
used or returned.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..library.schema import Function, Library

LITERALS = ("0.5", "2.0", "-1.25", "3.0", "0.75", "-0.5")


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
    def __init__(self, lib: Library, rng: random.Random, matrix: bool, functions: frozenset[str] | None = None):
        self.lib, self.rng, self.matrix = lib, rng, matrix
        self.funcs = _usable(lib, matrix, functions)
        if matrix and not any("matrix" in {p.type for p in f.params} for f in self.funcs):
            raise ValueError("the library has no function on matrices")
        self.inputs: dict[str, str] = {}      # name -> type
        self.computed: dict[str, str] = {}    # name -> type (current binding of the name)
        self.order: list[str] = []            # computed names, newest last
        self.used: set[str] = set()
        self.lines: list[str] = []
        self.counter = {"scalar": 0, "vector": 0, "matrix": 0}

    def fresh(self, type_: str, input_: bool) -> str:
        prefix = {"scalar": "s", "vector": "v", "matrix": "M"}[type_]
        if input_:
            prefix = {"scalar": "a", "vector": "x", "matrix": "A"}[type_]
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
        name = r.choice(reusable) if reusable and r.random() < 0.25 else self.fresh(out.type, False)
        if name in self.order:
            self.order.remove(name)
        self.computed[name] = out.type
        self.order.append(name)
        self.used.discard(name)
        self.lines.append(f"{name} = {f.name}({', '.join(args)});")

    def text(self, seed: int) -> str:
        r = self.rng
        unused = [n for n in self.order if n not in self.used]
        extra = [n for n in self.order if n in self.used and r.random() < 0.2]
        returned = list(dict.fromkeys(unused + extra)) or [self.order[-1]]
        names = {**self.inputs, **self.computed}
        decl = []
        for t in ("scalar", "vector", "matrix"):
            ns = [n for n, tt in names.items() if tt == t]
            if ns:
                decl.append(f"{t} {', '.join(ns)};")
        head = [f"# random script, seed {seed} ({'matrices and vectors' if self.matrix else 'vectors'})"]
        return "\n".join(head + decl + [f"input {', '.join(self.inputs)};"] + self.lines
                         + [f"return {', '.join(returned)};"]) + "\n"


def random_script(lib: Library, seed: int, calls: int | None = None, min_calls: int = 2,
                  max_calls: int = 10, matrix: bool | None = None,
                  functions: frozenset[str] | None = None) -> RandomScript:
    """The script of ``seed``: ``calls`` calls (default: between ``min_calls`` and ``max_calls``),
    with matrices or not (default: drawn), calling the library's functions (``functions``: only
    those of these names -- a seed then gives the script it gave before functions were added)."""
    rng = random.Random(seed)
    n = calls if calls is not None else rng.randint(min_calls, max_calls)
    if n < 1:
        raise ValueError("a script needs at least one call")
    has_matrix_fn = any(p.type == "matrix" for f in lib.functions for p in f.params
                        if functions is None or f.name in functions)
    m = (rng.random() < 0.6 and has_matrix_fn) if matrix is None else matrix
    b = _Builder(lib, rng, m, functions)
    for _ in range(n):
        b.call()
    return RandomScript(seed, b.text(seed), n, m)
