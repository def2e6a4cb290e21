"""Differential fuzzing of ``@kfuse.jit``'s tracing: seeded random functions of ordinary array code
(products, dots, linear combinations, entrywise operators and functions, broadcasting, reductions,
scalar arithmetic, several results) are traced on NumPy arguments of odd sizes, their programs
evaluated in float64 by ``kfuse.reference`` and every result compared with the function run on
NumPy itself.  A difference is a program that computes something else than the function: the
GPU would return it silently.  Tracing a function of the documented vocabulary raises nothing
(no Python traceback, no refusal), and the programs plan and generate code.

``python tests/test_trace_fuzz.py FIRST LAST`` runs the seeds FIRST .. LAST - 1 and prints each
failure's function (``--nvcc K``: also builds every K-th program's CUDA).  A rare failure there is
no bug: a comparison of two values equal but for rounding, which the traced program and NumPy
round differently (``2 * x + x - x`` is exactly ``2 * x`` traced), may come out either way."""
from __future__ import annotations

import math
import re
import sys
import textwrap

import numpy as np
import pytest

import kfuse
from kfuse.errors import KfuseError
from kfuse.reference import evaluate

SIZES = (1, 2, 7, 32, 33, 100, 257)
UNARY = ("-{}", "abs({})", "np.abs({})", "np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(np.tanh({}))",
         "np.exp(-np.abs({}))", "np.log(np.abs({}) + 1.0)", "np.log({} * {} + 0.5)", "np.sqrt(np.abs({}))",
         "np.square({})", "np.clip({}, -0.5, 0.75)", "{} ** 2", "{} ** 3", "np.abs({}) ** 0.5", "np.abs({}) ** 1.5",
         "(np.abs({}) + 0.5) ** -1", "(np.abs({}) + 0.5) ** -2.0", "{}.clip(-1.0, 1.0)", "np.exp({}.clip(-2.0, 2.0))",
         "np.reciprocal(np.abs({}) + 1.0)", "np.negative({})", "+{}", "np.clip({}, 0.0, None)", "np.fabs({})",
         "{}.clip(min=-0.25)", "np.tanh({}) ** 4", "np.sqrt({} ** 2 + 1.0)", "np.log(np.exp(np.tanh({})))",
         "2.0 / (np.abs({}) + 1.0)", "{} ** 0", "{} ** 1", "np.maximum({}, 0.0)", "np.minimum(0.5, {})",
         "np.where({} > 0.0, 1.0, -1.0)", "({} < 0.1) * 2.0")
BINARY = ("({} + {})", "({} - {})", "({} * {})", "({} / (np.abs({}) + 0.5))", "np.maximum({}, {})",
          "np.minimum({}, {})", "np.add({}, {})", "np.multiply({}, {})", "np.subtract({}, {})",
          "(({} > {}) * 1.0)", "(1.0 * ({} <= {}))", "(1.0 * ({} >= {}))", "np.divide({}, np.abs({}) + 1.0)",
          "np.where({} > {}, 2.0, 0.5)", "({0} - {1}) * ({0} + {1})", "({0} * {1} - {1})",
          "((({} > 0.1) + ({} < -0.1)) * 1.0)", "((({0} > {1}) * ({1} > 0.0) + ({0} < -0.5)) * {1})")
REDUCE = ("{}.sum()", "np.sum({})", "{}.max()", "{}.min()", "np.max({})", "np.min({})", "{}.mean()",
          "np.mean({})", "np.linalg.norm({})", "np.linalg.norm({}, 1)", "np.linalg.norm({}, np.inf)",
          "np.add.reduce({})", "np.amax({})", "np.amin({})", "np.maximum.reduce({})", "np.minimum.reduce({})",
          "np.linalg.norm({}, ord=2)", "{}.sum(axis=0)", "{}.max(0)", "np.sum({}, 0)", "np.min({}, -1)",
          "((({0} > 0.0) @ ({0} < 0.5)) * 1.0)")
SCALAR_NUMBERS = ("2.0", "0.5", "-1.5", "3", "1", "0.0", "-1")


class Gen:
    """One random function: its source text and its arguments.  Values are named by kind:
    scalars, vectors of the two lengths (``m`` rows, ``n`` columns) and m x n matrices (of one
    length where m is n: then vectors of either kind go anywhere).  Every operation's operands
    are kept where NumPy's result is finite (log, sqrt and division of positive values, exp of
    bounded ones)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        r = self.rng
        self.m, self.n = int(r.choice(SIZES)), int(r.choice(SIZES))
        if r.random() < 0.25:
            self.m = self.n
        self.args: list[tuple[str, str]] = []           # (name, kind) in order
        self.pools: dict[str, list[str]] = {"s": [], "m": [], "n": [], "A": []}
        if self.m == self.n:
            self.pools["m"] = self.pools["n"]
        self.device = r.random() < 0.3                  # scalars as 0-d arrays (device scalars)
        for kind, count in (("A", r.integers(0, 3)), ("m", r.integers(0, 3)), ("n", r.integers(1, 3)),
                            ("s", r.integers(0, 3))):
            for k in range(count):
                name = {"A": f"A{k}", "m": f"u{k}", "n": f"x{k}", "s": f"a{k}"}[kind]
                self.args.append((name, kind))
                self.pools[kind].append(name)
        r.shuffle(self.args)
        self.lines: list[str] = []
        self.names: list[str] = []          # the values the function makes, in order
        self.fresh: set[str] = set()        # those that are new arrays (not an argument's alias)
        self.temps = 0

    def pick(self, kind: str) -> str | None:
        """A value of ``kind``: a computed one (``t1`` ...) more often than its share."""
        pool = self.pools[kind]
        if not pool:
            return None
        temps = [p for p in pool if p.startswith("t")]
        if temps and self.rng.random() < 0.5:
            return str(self.rng.choice(temps))
        return str(self.rng.choice(pool))

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]

    # -- expressions of each kind --------------------------------------------------------------
    def vec(self, which: str, depth: int) -> str:
        """A vector expression of length m (``which`` "m") or n."""
        r = self.rng
        leaf = self.pick(which)
        if depth <= 0 or r.random() < 0.2:
            if leaf is not None:
                return leaf
            if depth <= -2:
                return self.product(which, 0) or f"({self.scalar(0)} * {self.vec(which, -3)})"
        k = int(r.integers(12))
        if k == 0:
            got = self.product(which, depth)
            if got is not None:
                return got
        if k == 1:
            return "(" + self.choice(UNARY).format(*[self.vec(which, depth - 1)] * 2) + ")"
        if k in (2, 3):
            a, b = self.vec(which, depth - 1), self.vec(which, depth - 1)
            return "(" + self.choice(BINARY).format(a, b) + ")"
        if k == 4:      # with a scalar
            s, v = self.scalar(depth - 1), self.vec(which, depth - 1)
            return self.choice(("({} * {})", "({1} * {0})", "({} + {})", "({1} - {0})", "({1} / ({0} * {0} + 1.0))",
                                "np.maximum({1}, {0})", "({0} / (np.abs({1}) + 1.0))", "({1} / 4)",
                                "(1.0 * ({1} > {0}))",
                                "np.where({1} < {0}, {0}, {1})", "np.clip({1}, -1.0 - {0} * {0}, {0} * {0})",
                                "({0} - {1})", "(-{0} * {1})", "({1} * {0} - {1})")).format(s, v)
        if k == 5:
            a, b, c = self.vec(which, depth - 1), self.vec(which, depth - 1), self.vec(which, depth - 1)
            return self.choice(("np.where({} > {}, {}, {})", "np.where({} < {}, {}, 0.25)")).format(a, b, c, b)
        if k == 6 and self.pools["A"]:      # a matrix's row or column sums
            M = self.mat(depth - 1)
            return self.choice((f"{M}.sum(axis={1 if which == 'm' else 0})", f"{M}.sum({1 if which == 'm' else 0})",
                                f"np.sum({M}, axis={-1 if which == 'm' else -2})"))
        if k == 7:      # linear combinations as BLAS write them
            s, t = self.scalar(depth - 2), self.scalar(depth - 2)
            return f"({s} * {self.vec(which, depth - 1)} + {t} * {self.vec(which, depth - 1)})"
        if k == 8:      # a scalar times a product plus a vector (a 5-argument gemv)
            got = self.product(which, depth - 1)
            if got is not None:
                return f"({self.scalar(depth - 2)} * {got} + {self.vec(which, depth - 1)})"
        if k == 10:     # library functions by name
            s, x, y = self.scalar(depth - 2), self.vec(which, depth - 1), self.vec(which, depth - 1)
            got = self.product(which, depth - 1) if r.random() < 0.3 else None
            if got is not None and self.pools["A"]:
                M = self.pick("A")
                x = self.vec("n" if which == "m" else "m", depth - 1)
                fn = "gemv" if which == "m" else "gemtv"
                return self.choice((f"kfuse.lib.{fn}({M}, {x})", f"kfuse.lib.{fn}({s}, {M}, {x}, {s}, {y})"))
            return self.choice((f"kfuse.lib.axpy({s}, {x}, {y})", f"kfuse.lib.vmul({x}, {y})",
                                f"kfuse.lib.axpby({s}, {x}, 0.5, {y})", f"kfuse.lib.scal({s}, {x})"))
        if k == 9 and leaf is not None:     # a value read twice in one expression
            return self.choice(("({0} + {0})", "({0} - 0.5 * {0})", "({0} * {0} - {0})", "(2 * {0} + {1} - {0})")) \
                .format(leaf, self.vec(which, depth - 1))
        return self.vec(which, depth - 1) if depth > -3 else (leaf or f"(1.0 * {self.vec(which, -3)})")

    def product(self, which: str, depth: int) -> str | None:
        """A matrix-vector product giving a vector of length ``which``, or None (no matrix)."""
        if not self.pools["A"]:
            return None
        M = self.mat(depth - 1) if self.rng.random() < 0.3 else self.pick("A")
        if which == "m":
            x = self.vec("n", depth - 1)
            return self.choice((f"({M} @ {x})", f"np.dot({M}, {x})", f"np.matmul({M}, {x})", f"{M}.dot({x})",
                                f"({x} @ {M}.T)"))
        u = self.vec("m", depth - 1)
        return self.choice((f"({M}.T @ {u})", f"({u} @ {M})", f"np.dot({M}.T, {u})", f"np.dot({u}, {M})",
                            f"{u}.dot({M})"))

    def mat(self, depth: int) -> str:
        r = self.rng
        A = self.pick("A")
        assert A is not None
        if depth <= 0 or r.random() < 0.4:
            return A
        k = int(r.integers(11))
        if k == 0:
            return f"({self.mat(depth - 1)} + {self.mat(depth - 1)})"
        if k == 1:
            return f"({self.choice(SCALAR_NUMBERS)} * {self.mat(depth - 1)})"
        if k == 2:
            return f"({self.mat(depth - 1)} * ({self.vec('m', depth - 2)})[:, None])"
        if k == 3:
            return f"(({self.vec('n', depth - 2)})[None, :] * {self.mat(depth - 1)})"
        if k == 4:
            return f"({A} + np.outer({self.vec('m', depth - 2)}, {self.vec('n', depth - 2)}))"
        if k == 5:
            return f"({self.mat(depth - 1)} - {self.mat(depth - 1)})"
        if k == 6:
            return f"({self.mat(depth - 1)} * {self.vec('n', depth - 2)})"     # a bare vector: along the columns
        if k == 7:
            return f"({self.scalar(depth - 2)} * {self.mat(depth - 1)} / 2.0)"
        if k == 8:
            return f"({self.mat(depth - 1)} + ({self.vec('m', depth - 2)})[:, np.newaxis] * " \
                   f"({self.vec('n', depth - 2)})[np.newaxis, :])"
        if k == 9:
            u, v = self.vec('m', depth - 2), self.vec('n', depth - 2)
            return self.choice((f"({A} + kfuse.outer({u}, {v}))", f"kfuse.lib.ger({A}, {u}, {v})",
                                f"kfuse.lib.madd({A}, {self.mat(depth - 1)})", f"({A} - 0.5 * np.outer({u}, {v}))"))
        return "(" + self.choice(UNARY).format(*[self.mat(depth - 1)] * 2) + ")"

    def scalar(self, depth: int) -> str:
        r = self.rng
        leaf = self.pick("s")
        if depth <= 0 or r.random() < 0.25:
            return leaf if leaf is not None and r.random() < 0.7 else self.choice(SCALAR_NUMBERS)
        k = int(r.integers(6))
        which = self.choice(("m", "n")) if self.pools["m"] or self.pools["A"] else "n"
        if k == 0:
            return f"({self.vec(which, depth - 1)} @ {self.vec(which, depth - 1)})"
        if k == 1:
            return self.choice(REDUCE).format(self.vec(which, depth - 1))
        if k == 2:
            a, b = self.scalar(depth - 1), self.scalar(depth - 1)
            return self.choice(("({} + {})", "({} - {})", "({} * {})", "({0} / ({1} * {1} + 1.0))")).format(a, b)
        if k == 3:
            a = self.scalar(depth - 1)
            return self.choice(("(-{0})", "kfuse.sqrt({0} * {0} + 0.25)", "(({0} * {0}) ** 0.5)", "({0} ** 2)",
                                "np.sqrt({0} * {0} + 1.0)", "({0} / 3)", "(1 - {0})")).format(a)
        if k == 4:
            return self.choice(("np.dot({}, {})", "kfuse.lib.dot({}, {})")).format(self.vec(which, depth - 1),
                                                                                  self.vec(which, depth - 1))
        return leaf or self.choice(SCALAR_NUMBERS)

    # -- the function ----------------------------------------------------------------------------
    def traced(self) -> list[str]:
        return [a for a, _ in self.args] + self.names

    def statement(self, kind: str, depth: int) -> str | None:
        """A new value's statement, an alias (``u = t``) or an in-place update of a computed
        value (``t += ...``: NumPy updates t for every name bound to it), or None."""
        r = self.rng
        fresh = [t for t in self.pools[kind] if t in self.fresh]
        e = {"n": lambda: self.vec("n", depth), "m": lambda: self.vec("m", depth),
             "s": lambda: self.scalar(depth), "A": lambda: self.mat(depth)}[kind]()
        if not set(re.findall(r"\b[A-Za-z_]\w*\b", e)) & set(self.traced()):
            return None         # a Python number: no traced value
        if fresh and r.random() < 0.15:
            t = self.choice(fresh)
            return self.choice((f"{t} += {e}", f"{t} -= {e}", f"{t} *= {e}", f"{t} **= 2", f"{t} *= 0.5",
                                f"{t} /= ({e} * {e} + 1.0)" if kind == "s" else f"{t} /= (np.abs({e}) + 1.0)"))
        self.temps += 1
        name = f"t{self.temps}"
        if r.random() < 0.1 and fresh:
            e = self.choice(fresh)          # an alias of a computed value
        elif not re.fullmatch(r"\w+", e):
            self.fresh.add(name)            # a new array (not an argument's)
        self.names.append(name)
        self.pools[kind].append(name)
        return f"{name} = {e}"

    # -- the function ----------------------------------------------------------------------------
    def source(self) -> str:
        r = self.rng
        kinds = ["n", "n", "s"] + (["m", "m"] if self.pools["m"] or self.pools["A"] else []) + \
            (["A"] if self.pools["A"] else [])
        for _ in range(int(r.integers(1, 6))):
            line = self.statement(self.choice(kinds), int(r.integers(1, 4)))
            if line is not None:
                self.lines.append(line)
        made = list(self.names) or [self.choice([a for a, _ in self.args])]
        r.shuffle(made)
        out = made[:int(r.integers(1, len(made) + 1))]
        if self.names and self.names[-1] not in out:      # the last value made, mostly computed
            out.append(self.names[-1])
        if r.random() < 0.2:
            out.append(self.choice([a for a, _ in self.args]))
        if r.random() < 0.1:
            out.append(self.choice(out))
        if r.random() < 0.15 and self.pools["s"]:
            s = self.pick("s")
            out.append(self.choice((f"{s} * 2.0 - 1.0", f"-{s}", f"{s} / 4", f"kfuse.sqrt({s} * {s})", f"{s} + {s}")))
        ret = out[0] if len(out) == 1 and r.random() < 0.5 else ", ".join(out) + ("," if len(out) == 1 else "")
        params = ", ".join(a for a, _ in self.args)
        body = "\n".join(self.lines + [f"return {ret}"])
        return f"def f({params}):\n{textwrap.indent(body, '    ')}\n"

    def values(self, dtype="float64", seed: int = 0, sizes: tuple[int, int] | None = None) -> list:
        """Arguments: matrices and vectors uniform in [-1, 1], scalars as Python numbers (0-d
        arrays where the function takes device scalars); ``sizes``: (m, n) other than the
        function's."""
        r = np.random.default_rng(seed)
        m, n = sizes or (self.m, self.n)
        out: list = []
        for _, kind in self.args:
            if kind == "s":
                a = float(r.uniform(0.5, 2.0) * r.choice([-1.0, 1.0]))
                out.append(np.array(a, dtype) if self.device else a)
            else:
                shape = {"m": (m,), "n": (n,), "A": (m, n)}[kind]
                out.append(r.uniform(-1.0, 1.0, shape).astype(dtype))
        return out


class DeviceScalar:
    """A 0-d device array as tracing sees it (its shape and dtype): a device scalar input."""
    shape, ndim = (), 0

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)


def for_tracing(args: list) -> list:
    """The arguments as a call passes them: 0-d arrays as device scalars (``DeviceScalar``)."""
    return [DeviceScalar(a.dtype) if isinstance(a, np.ndarray) and a.ndim == 0 else a for a in args]


def make(seed: int):
    """(the generated function's source, the function, its arguments, its generator) of a seed."""
    g = Gen(seed)
    src = g.source()
    scope = {"np": np, "kfuse": kfuse}
    exec(compile(src, f"<fuzz {seed}>", "exec"), scope)
    return src, scope["f"], g.values(seed=seed), g


def traced_results(lowered, args) -> list:
    """What a call returns, computed from the traced program by ``kfuse.reference`` in float64."""
    prog = lowered.program
    inputs = {name: args[k] for name, k in lowered.inputs}
    env = evaluate(prog, inputs)
    outs = [env[next(v for v in prog.outputs if v.name == name).id] for name in lowered.outputs]

    def scalar(n):
        if n.kind == "lit":
            return n.data
        if id(n) in lowered.leaves:
            where, k = lowered.leaves[id(n)]
            return float(outs[k] if where == "out" else args[k])
        a = [scalar(x) for x in n.args]
        if n.kind == "neg":
            return -a[0]
        if n.kind == "sqrt":
            return math.sqrt(a[0]) if a[0] >= 0 else math.nan
        return {"+": a[0] + a[1], "-": a[0] - a[1], "*": a[0] * a[1],
                "/": a[0] / a[1] if a[1] else math.copysign(math.inf, a[0]) * math.copysign(1, a[1])}[n.data]
    return [outs[r[1]] if r[0] == "out" else args[r[1]] if r[0] == "arg" else scalar(r[1]) for r in lowered.returns]


def differs(got, want) -> str | None:
    """Why a traced result is not NumPy's (shape, NaN, infinities, or an error over 1e-9 of the largest
    entry, or of 1e-6 where all are smaller: a difference that cancels), or None."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape}, NumPy's {want.shape}"
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    if (nan_got != nan_want).any():
        return "NaN where NumPy has none" if nan_got.any() else "a number where NumPy has NaN"
    ok = ~nan_got
    g, w = got[ok], want[ok]
    inf = np.isinf(w) | np.isinf(g)
    if (g[inf] != w[inf]).any():
        return "infinities differ"
    g, w = g[~inf], w[~inf]
    scale = max(float(np.max(np.abs(w), initial=0.0)), 1e-6)     # a difference that cancels: rounding's size
    err = float(np.max(np.abs(g - w), initial=0.0)) / scale
    return f"relative error {err:.3g}" if err > 1e-9 else None


DOCUMENTED = ("computes nothing on the GPU",                    # returns its arguments
              "row or column sums of an expression that is not 0 where the matrix is 0")   # np.exp(A).sum(axis=1)


def disagreement(fn, args, src: str = "") -> str | None:
    """Why ``fn`` traced on ``args`` computes something else than ``fn`` on NumPy (``src``, the
    function's source, heads the message), or None where every result agrees."""
    with np.errstate(all="ignore"):
        returned = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    want = list(returned) if isinstance(returned, tuple) else [returned]
    try:
        lowered, single = kfuse.jit(fn).lowered(*for_tracing(args))
    except KfuseError as e:
        if any(why in str(e) for why in DOCUMENTED):
            return None
        return f"{src}refused: {type(e).__name__}: {e}"
    except Exception as e:      # noqa: BLE001 - what is looked for: a Python traceback for user code
        import traceback
        return f"{src}raised {type(e).__name__}: {e}\n{traceback.format_exc()}"
    with np.errstate(all="ignore"):
        got = traced_results(lowered, args)
    if len(got) != len(want) or single != (not isinstance(returned, tuple)):
        return f"{src}{len(got)} result(s) (single {single}), NumPy {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        why = differs(g, w)
        if why:
            return f"{src}result {k + 1}: {why}\n traced: {np.asarray(g)!r}\n numpy:  {np.asarray(w)!r}\n" \
                   f"{lowered.script}"
    return None


def other_sizes(lowered, fn, g: Gen, seed: int) -> str | None:
    """Why the program traced at the function's sizes computes something else than NumPy at
    other sizes (a call of another shape runs the same program: its sizes are symbolic), or
    None.  The other sizes keep a square matrix square; where NumPy takes them and the program's
    size rules do not (a binding would refuse them), that is the difference."""
    r = np.random.default_rng(seed + 1)
    m, n = int(r.choice(SIZES)), int(r.choice(SIZES))
    if g.m == g.n:
        m = n
    elif m == n:
        return None
    args = g.values(seed=seed + 1, sizes=(m, n))
    try:
        with np.errstate(all="ignore"):
            returned = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    except ValueError:          # NumPy takes no such shapes either
        return None
    want = list(returned) if isinstance(returned, tuple) else [returned]
    sizes: dict[int, int] = {}
    for name, k in lowered.inputs:
        v = next(v for v in lowered.program.inputs if v.name == name)
        for d, size in zip(v.dims, np.shape(args[k])):
            if sizes.setdefault(d, size) != size:
                return f"at sizes m={m}, n={n} (NumPy takes them) the program's sizes disagree: {name}"
    with np.errstate(all="ignore"):
        got = traced_results(lowered, args)
    for k, (a, b) in enumerate(zip(got, want)):
        why = differs(a, b)
        if why:
            return f"at sizes m={m}, n={n}, result {k + 1}: {why}"
    return None


def check(seed: int, nvcc=None, tmp_path=None):
    """None where seed's function traces to a program computing what NumPy computes, plans and
    generates code (``nvcc``: code that builds), else why not (the function's source heads the
    message)."""
    src, fn, args, g = make(seed)
    why = disagreement(fn, args, src)
    if why is not None:
        return why
    try:
        lowered = kfuse.jit(fn).trace(*for_tracing(args))
    except KfuseError:          # refused as documented (disagreement says which)
        return None
    why = other_sizes(lowered, fn, g, seed)
    if why is not None:
        return f"{src}{why}\n{lowered.script}"
    try:
        dtype = "float32" if seed % 2 else "float64"
        typed = [a.astype(dtype) if isinstance(a, np.ndarray) else a for a in args]
        compiled = kfuse.jit(fn).compile(*for_tracing(typed))
        source = compiled.cuda_source
    except KfuseError as e:
        return f"{src}compile refused: {type(e).__name__}: {e}\n{lowered.script}"
    except Exception as e:      # noqa: BLE001
        import traceback
        return f"{src}compile raised {type(e).__name__}: {e}\n{traceback.format_exc()}"
    if nvcc is not None:
        from test_nvcc import nvcc_compile
        try:
            nvcc_compile(nvcc, source, tmp_path, f"fuzz{seed}")
        except AssertionError as e:
            return f"{src}nvcc failed: {str(e)[-2000:]}"
    return None


def _arguments(*shapes, seed: int = 0) -> list:
    """Arguments uniform in [-1, 1] of these shapes (() a Python number)."""
    r = np.random.default_rng(seed)
    return [float(r.uniform(0.5, 2.0)) if shape == () else r.uniform(-1.0, 1.0, shape) for shape in shapes]


# -- what the fuzzer found ----------------------------------------------------------------------------
def test_a_matrix_read_twice_in_a_sum_is_a_map():
    """``A + (A + B)`` is ``2 A + B``: no BLAS call scales a matrix, so the sum is one map (it
    was refused as "a scaled matrix"); a sum of distinct matrices is still madd."""
    def f(A, B, u, v):
        return A + A, A + (A + B), (A + B) + A + np.outer(u, v), A + B
    args = _arguments((5, 3), (5, 3), (5,), (3,))
    assert disagreement(f, args) is None
    script = kfuse.jit(f).trace(*args).script
    assert "= 2.0 * A;" in script and "= madd(A, B);" in script and "ger(" in script


def test_an_outer_product_inside_elementwise_code_is_a_map():
    """``np.outer(u, v)`` read by elementwise code (``np.tanh(A + np.outer(u, v))``, ``np.outer(u, v) * A``)
    is ``u[:, None] * v[None, :]`` in the map (it was refused as "outer(u, v) alone"); ``A + np.outer(u, v)``
    is still ger."""
    def f(A, u, v):
        return np.tanh(A + np.outer(u, v)), np.outer(u, v) * A, v[None, :] * (A + kfuse.outer(u, v)), A + np.outer(u, v)
    args = _arguments((5, 3), (5,), (3,))
    assert disagreement(f, args) is None
    script = kfuse.jit(f).trace(*args).script
    assert "tanh(A + ((u[:, None]) * (v[None, :])))" in script and script.count("ger(") == 1


def test_a_vector_times_a_transpose_is_a_product():
    """``x @ A.T`` and ``np.dot(x, A.T)`` are ``A @ x`` (they were refused as "vector @ matrix")."""
    def f(A, x, u):
        return x @ A.T, np.dot(u @ A, A.T) + u
    assert disagreement(f, _arguments((5, 3), (3,), (5,))) is None


def test_a_scaled_broadcast_vector_beside_a_matrix_is_elementwise():
    """``2.0 * u[:, None] + A`` and ``-u[:, None] + A``: the scaled broadcast vector keeps its
    broadcast shape (it was refused as "+: shapes (5, 1) and (5, 3) differ")."""
    def f(A, u, v):
        return 2.0 * u[:, None] + A, A - (-u[:, None]), (v[None, :] / 4 - A) * v, (A * u[:, None]).T @ u
    assert disagreement(f, _arguments((5, 3), (5,), (3,))) is None


@pytest.mark.parametrize("case", range(3))
def test_a_size_of_1_that_numpy_would_stretch_is_refused_at_the_line(case):
    """NumPy stretches an array's own size 1 (``x * y`` of shapes (1,) and (5,)); the program's
    sizes cannot, so tracing refuses it at the user's line (it traced, and the compile failed
    with "sizes ... name the same size of the script")."""
    f, shapes = [(lambda x, y: x * y, [(1,), (5,)]), (lambda A, u: A * u, [(5, 1), (5,)]),
                 (lambda A, B: np.maximum(A, B), [(1, 3), (5, 3)])][case]
    with pytest.raises(kfuse.TraceError, match="kfuse broadcasts no size of 1 of a vector or matrix") as e:
        kfuse.jit(f).compile(*_arguments(*shapes))
    assert e.value.file == __file__


def test_numpy_scalars_are_numbers():
    """NumPy's numbers (``np.float32(2)``, ``np.abs(3)`` an ``np.int64``) are numbers of the
    function as Python's are (they were refused as "cannot be combined with a int64"); bools
    are still refused."""
    def f(x, y):
        return x * np.float32(2) + np.int64(3) * y, np.clip(x, -np.abs(3), np.abs(1)) ** np.int64(2), \
            (x @ y) * np.float32(0.5) + np.float16(1)
    assert disagreement(f, _arguments((5,), (5,))) is None
    with pytest.raises(kfuse.TraceError, match="cannot be combined with a bool"):
        kfuse.jit(lambda x: x * np.True_).compile(np.ones(5))


def test_an_axis_given_by_position_is_the_axis():
    """``x.max(0)``, ``np.max(x, 0)`` and ``np.sum(A, 1)`` reduce along the axis NumPy's second
    argument names: ``x.max(0)`` was traced as ``np.maximum(x, 0)`` (a silently wrong vector where
    NumPy has the largest entry) and ``x.sum(0)`` refused; a traced second operand is still
    torch's ``torch.max(a, b)``, the entrywise maximum."""
    def wrong(x, y):
        return x.max(0) * y, np.max(x, 0) + y, x.min(-1)

    def refused(x, y, A):
        return np.amin(x, -1) * y, x.sum(0) * y, np.sum(A, 1), A.sum(0), np.mean(x, 0) * y, np.sum(x, None)
    assert disagreement(wrong, _arguments((5,), (5,))) is None
    assert disagreement(refused, _arguments((5,), (5,), (5, 3))) is None
    script = kfuse.jit(lambda x, y: x.max(y)).trace(*_arguments((5,), (5,))).script
    assert "maximum(x, y)" in script


def test_arguments_named_like_the_scripts_type_words_trace():
    """A parameter named ``subvector32`` or ``TILE32x32`` (type words of scripts) is renamed in
    the script; appending numbers never left the type word's pattern, so tracing looped forever."""
    import signal

    def timeout(*_):
        raise TimeoutError("tracing did not finish")
    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(20)
    try:
        def f(subvector32, TILE32x32, y):
            return subvector32 + y, TILE32x32 @ y
        args = _arguments((5,), (5, 5), (5,))
        assert disagreement(f, args) is None
        assert "input subvector32_, TILE32x32_, y;" in kfuse.jit(f).trace(*args).script
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_comparisons_results_keep_numpys_bool_arithmetic():
    """Comparisons give NumPy bools: the sum of two is their logical or (it was 2.0 where both
    held), their dot product whether any pair holds; the rest of their arithmetic is that of 1
    and 0.  A difference or negation of bools, and a matrix product of them, are refused as NumPy
    refuses or redefines them."""
    def f(x, y, A):
        return (x > 0) + (y > 0), ((x > 0) + (y > 0) + (x < y)) * y, np.add(x > 0, y > 0.2).sum(), \
            (x > 0) @ (y > 0), (A > 0) + (x > 0)[:, None], (x > 0) * (y > 0) - x, (x > 0) @ y + 2.0 * (y > 0)
    assert disagreement(f, _arguments((5,), (5,), (5, 5))) is None
    for g in (lambda x, y, A: (x > 0) - (y > 0), lambda x, y, A: -(x > y), lambda x, y, A: (A > 0) @ (x > 0)):
        with pytest.raises(kfuse.TraceError, match="comparisons' results"):
            kfuse.jit(g).trace(*_arguments((5,), (5,), (5, 5)))


def test_in_place_operators_update_the_array_as_numpy_does():
    """``t += y`` updates t in place: a name bound to t before sees the new value, as in NumPy
    (it was rebound, and the other name kept the old value); a scalar is rebound.  Updating an
    argument in place is refused in a jitted function (the caller's array would not be written)
    and allowed in a loop body, whose state the loop owns."""
    def f(x, y):
        t = x + y
        alias, before = t, (t, t @ y)
        t += y
        t *= 2.0
        s = x @ y
        r = s
        s += 1.0
        return alias, before[0], before[1], t, x * r, s
    assert disagreement(f, _arguments((5,), (5,))) is None

    def g(x, y):
        x += y
        return x
    with pytest.raises(kfuse.TraceError, match="x \\+= ... would write argument x in place"):
        kfuse.jit(g).trace(*_arguments((5,), (5,)))

    def copies(x, y):           # +x, x.copy() and np.copy(x) are new arrays: updating them leaves x
        t, u, w = +x, x.copy(), np.copy(y)
        t *= 0.5
        u += y
        w **= 2
        return t, u, w, x, y
    assert disagreement(copies, _arguments((5,), (5,))) is None

    def body(i, state):
        x, y = state
        x -= 0.5 * y
        return state
    assert "= axpy(-1.0, state1, state0);" in kfuse.explain_loop(body, tuple(_arguments((5,), (5,))))  # 2 steps


# -- the fuzzer at fixed seeds --------------------------------------------------------------------------
FIXED = range(60)
BUILT = (0, 3, 7, 12, 21, 30)        # seeds whose CUDA nvcc builds (float64 where even, float32 where odd)


def traces(seed: int) -> bool:
    """Seed's function traces into a program (not refused, as documented, at its line)."""
    src, fn, args, _ = make(seed)
    try:
        kfuse.jit(fn).trace(*for_tracing(args))
    except KfuseError:
        return False
    return True


@pytest.mark.parametrize("seed", FIXED)
def test_traced_functions_compute_what_numpy_computes(seed):
    """Seeded random functions of ordinary array code trace to programs whose float64 reference
    is NumPy's value, at their sizes and at others, and plan and generate code."""
    why = check(seed)
    assert why is None, why


def test_the_fixed_seeds_are_traced_not_refused():
    """Most generated functions are programs (the comparison above checks something)."""
    assert sum(traces(s) for s in FIXED) >= 0.8 * len(FIXED)


def test_traced_programs_of_the_fixed_seeds_build(nvcc, tmp_path):
    for seed in BUILT:
        assert traces(seed)
        why = check(seed, nvcc, tmp_path)
        assert why is None, why


def test_the_fuzzer_finds_a_wrong_program(monkeypatch):
    """The comparison is live: a program whose linear combinations drop a sign differs."""
    from kfuse.frontend import traceops
    real = traceops.linear

    def wrong(op, a, b):
        return real("+" if op == "-" else op, a, b)
    monkeypatch.setattr(traceops, "linear", wrong)
    assert sum(check(s) is not None for s in FIXED[:20]) >= 3


if __name__ == "__main__":
    import argparse
    import shutil
    import tempfile
    import time
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    p = argparse.ArgumentParser()
    p.add_argument("first", type=int)
    p.add_argument("last", type=int)
    p.add_argument("--nvcc", type=int, default=0, help="build every K-th program's CUDA with nvcc")
    p.add_argument("--quiet", action="store_true")
    o = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    nv = shutil.which("nvcc")
    bad, start = 0, time.time()
    for s in range(o.first, o.last):
        why = check(s, nv if o.nvcc and s % o.nvcc == 0 else None, tmp)
        if why:
            bad += 1
            print(f"=== seed {s}\n{why if not o.quiet else why.splitlines()[-1]}\n", flush=True)
    print(f"{o.last - o.first} cases, {bad} failures, {time.time() - start:.0f} s")
