"""Python front end, part 2: a traced expression graph (``frontend/trace.py``) as library calls.

Each value the function computes becomes library calls, chosen for a whole expression at once:

* a vector expression is flattened into a linear combination ``c1 X1 + c2 X2 + ...`` of terms
  (coefficients are scalar expressions); a matrix-vector product read only here is fused into a
  ``gemv``/``gemtv`` with ``alpha`` and ``beta`` (``a * (A @ x) + b * y`` is one call) unless
  they are computed in the function (see ``_computed``); the rest become ``scal``, ``axpy``,
  ``axpby`` or ``vadd``;
* a matrix expression ``A + B + c * outer(u, v)`` becomes ``madd`` and ``ger`` calls;
* ``x @ y`` is ``dot``; scalar arithmetic stays arithmetic, written into the scalar arguments of
  the calls that use it (evaluated on the device); a scalar expression used more than once gets a
  name (``s2 = rr / s1;``).

A node read by more than one other node is computed once and named.  The result is a list of
statements, each with the user's line that made it; ``frontend/lowered.py`` builds the program IR
from them (errors name that line) and renders them as a script for people (``fn.script``).
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import TraceError
from ..ir.program import SIZE_WORDS
from ..library import ewexpr
from .lowered import Lowered, Statement, name_node, program_of
from .tokens import Tok
from .trace import RANK_WORDS, Node, Site, Trace, lit

_RESERVED = {"input", "return", "scalar", "vector", "matrix", "csr", "sqrt", "out", "sync", "stream"}
_TYPE_WORD = re.compile(r"subvector\d+|TILE\d+x\d+", re.IGNORECASE)     # the scripts' old type names


def _is_one(n: Node) -> bool:
    return n.kind == "lit" and n.data == 1.0


def _smul(a: Node, b: Node) -> Node:
    """a * b with literals folded (coefficient products made while lowering)."""
    if _is_one(a):
        return b
    if _is_one(b):
        return a
    if a.kind == "lit" and b.kind == "lit":
        return lit(a.data * b.data, a.site)
    if a.kind == "lit" and a.data == -1.0:
        return _sneg(b)
    if b.kind == "lit" and b.data == -1.0:
        return _sneg(a)
    return Node("bin", 0, (a, b), "*", a.site)


def _sneg(a: Node) -> Node:
    if a.kind == "lit":
        return lit(-a.data, a.site)
    if a.kind == "neg":
        return a.args[0]
    return Node("neg", 0, (a,), site=a.site)


class _Lowering:
    """A traced graph turned into statements (see the module docstring): one method per kind of
    node and per step of combining terms into BLAS calls, hence their number."""
    def __init__(self, trace: Trace):
        self.trace = trace
        self.body: list[Statement] = []
        self.names: dict[int, str] = {}           # id(node) -> script name (computed or input)
        self.call_outs: dict[int, list[str]] = {}     # id(call node) -> its outputs' script names
        self.decls: dict[str, list[str]] = {"scalar": [], "vector": [], "matrix": [], "csr": []}
        self.taken: set[str] = set()
        self.counter = 0
        self.inputs: list[tuple[str, int]] = []
        self.device: list[str] = []
        self.sizes: dict[str, int] = {}
        for k, (node, name) in enumerate(zip(trace.args, trace.names)):
            if node.uses == 0:
                continue
            spec = node.data
            script = self.fresh(re.sub(r"\W", "_", name) if name.isidentifier() else "arg")
            self.names[id(node)] = script
            self.decls[RANK_WORDS[node.rank]].append(script)
            self.inputs.append((script, k))
            if spec.kind == "dscalar":
                self.device.append(script)
            for word, size in zip(SIZE_WORDS.get(node.rank, ()), spec.shape if node.rank == 3 else node.shape):
                self.sizes[f"{script}.{word}"] = size       # a grid: its length; a csr: rows, cols, nnz

    def fresh(self, base: str, numbered: bool = False) -> str:
        """An unused script name: ``base`` (an argument's own name when it can be one), else
        ``base`` with a number."""
        if _TYPE_WORD.fullmatch(base):      # subvector32, TILE32x32: still type words with a number appended
            base += "_"
        name = f"{base}{self._next()}" if numbered else base
        while name in self.taken or name in _RESERVED or self.trace.library.overloads(name) \
                or _TYPE_WORD.fullmatch(name):
            name = f"{base}{self._next()}"
        self.taken.add(name)
        return name

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def new_value(self, rank: int) -> str:
        name = self.fresh({0: "s", 1: "v", 2: "M"}[rank], numbered=True)
        self.decls[RANK_WORDS[rank]].append(name)
        return name

    def emit(self, fn: str, args: list, rank: int, site: Site) -> str:
        """A call of ``fn`` on ``args`` (scalar expressions, and vectors and matrices by name)
        into a new value; its name."""
        out = self.new_value(rank)
        self.body.append(Statement((out,), fn, tuple(name_node(a) if isinstance(a, str) else a for a in args), site))
        return out

    # -- scalars ------------------------------------------------------------------------------------
    def scalar(self, n: Node) -> tuple:
        """A scalar argument as an expression (``frontend/build.py``'s nodes; a new one each
        time: the builder takes no shared nodes).  A node read more than once (``uses >= 2``:
        ``a * a`` reads ``a`` twice) is a named statement, made once and then read by name
        (``self.names``), so a chain of shared steps is written once, not once per path."""
        if id(n) in self.names:
            return name_node(self.names[id(n)])
        k = n.kind
        if k == "lit":
            return ("num", Tok("num", repr(n.data), 0, 0))      # finite (trace.lit)
        if k == "dot":
            name = self.emit("dot", [self.tensor(n.args[0]), self.tensor(n.args[1])], 0, n.site)
        elif k == "red":        # sum(expr) and its kin: a reduction the builder synthesizes
            name = self.expression(n)
        elif k == "out":
            name = self.call_out(n)
        else:
            operands = tuple(self.scalar(a) for a in n.args)
            expr = (("neg" if k == "neg" else "sqrt" if k == "sqrt" else n.data), operands[0][1], *operands)
            if n.uses < 2:
                return expr
            name = self.new_value(0)
            self.body.append(Statement((name,), None, (expr,), n.site))
        self.names[id(n)] = name
        return name_node(name)

    # -- vectors and matrices -------------------------------------------------------------------------
    def call_out(self, n: Node) -> str:
        """The script name of output ``n.data`` of a library call (the call emitted once)."""
        call = n.args[0]
        if id(call) not in self.call_outs:
            fn = call.data
            args = tuple(self.scalar(a) if a.rank == 0 else name_node(self.tensor(a)) for a in call.args)
            outs = [self.new_value({"scalar": 0, "vector": 1, "matrix": 2}[p.type]) for p in fn.outputs]
            self.body.append(Statement(tuple(outs), fn.name, args, call.site))
            self.call_outs[id(call)] = outs
        name = self.call_outs[id(call)][n.data]
        self.names[id(n)] = name
        return name

    def tensor(self, n: Node) -> str:
        if id(n) in self.names:
            return self.names[id(n)]
        if n.kind == "out":
            return self.call_out(n)
        if n.kind in ("red", "ew", "bcast") or (n.kind in ("add", "scale") and self.elementwise(n, root=True)):
            name = self.names[id(n)] = self.expression(n)     # red: a matrix expression's row or column sums
            return name
        if n.kind not in ("add", "scale", "matvec", "outer"):
            raise TraceError(f"internal: no script value for a {n.kind} node", n.site)
        terms = self.terms(n, lit(1.0, n.site), root=True)
        name = self.combine(terms, n) if n.rank == 1 else self.combine_matrix(terms, n)
        self.names[id(n)] = name
        return name

    # -- elementwise regions ----------------------------------------------------------------------------
    def expression(self, n: Node) -> str:
        """An expression statement computing ``n`` (an elementwise region, or a reduction of
        one) into a new value; its name."""
        name = self.new_value(n.rank)
        if n.kind == "red":
            expr = ("call", Tok("ident", n.data, 0, 0), self.region(n.args[0], root=True))
        else:
            expr = self.region(n, root=True)
        self.body.append(Statement((name,), None, (expr,), n.site))
        return name

    def elementwise(self, n: Node, root: bool = False) -> bool:
        """``n`` (a linear combination) holds, among the nodes it takes in, an elementwise
        operation, or scales a matrix: the BLAS make no call of it, one synthesized map does."""
        if not root and (n.uses > 1 or id(n) in self.names):
            return False
        if n.kind in ("ew", "bcast"):
            return True
        if n.kind == "scale":
            x = n.args[1]
            return (n.rank == 2 and x.kind != "outer") or self.elementwise(x)
        if n.kind == "add":
            return any(self.elementwise(a) for a in n.args)
        return False

    def region(self, n: Node, root: bool = False) -> tuple:
        """An elementwise region as an expression node of the builder's (``frontend/ewbuild.py``):
        its elementwise and linear nodes read nowhere else; its leaves are values by name (made
        first: products, library calls, nodes read more than once) and scalar expressions."""
        private = root or (n.uses <= 1 and id(n) not in self.names)
        tok = Tok("ident", "x", 0, 0)
        if n.rank == 0:
            return self.scalar(n)
        if n.kind == "outer":       # u v^T is no value of its own (ger takes it in): u[:, None] * v[None, :]
            return ("*", tok, ("row", tok, name_node(self.tensor(n.args[0]))),
                    ("col", tok, name_node(self.tensor(n.args[1]))))
        if not private or n.kind not in ("ew", "bcast", "add", "scale"):
            return name_node(self.tensor(n))
        if n.kind == "add":
            return ("+", tok, self.region(n.args[0]), self.region(n.args[1]))
        if n.kind == "scale":
            return ("*", tok, self.scalar(n.args[0]), self.region(n.args[1]))
        if n.kind == "bcast":
            return (n.data, tok, name_node(self.tensor(n.args[0])))
        op, args = n.data, [self.region(a) for a in n.args]
        if op == "neg" or op == "sqrt":
            return (op, tok, *args)
        if op in ewexpr.BINARY and op not in ("maximum", "minimum"):
            return (op, tok, *args)
        return ("call", Tok("ident", op, 0, 0), *args)

    def terms(self, n: Node, coef: Node, root: bool = False) -> list[tuple[Node, Node]]:
        """(coefficient, base) terms of a linear combination; nodes read elsewhere are bases."""
        private = root or (n.uses <= 1 and id(n) not in self.names)
        if private and n.kind == "add":
            out = self.terms(n.args[0], coef) + self.terms(n.args[1], coef)
            merged: dict[int, tuple[Node, Node]] = {}
            for c, b in out:          # x + a x = (1 + a) x
                if id(b) in merged:
                    c0 = merged[id(b)][0]
                    c = lit(c0.data + c.data, c.site) if c0.kind == c.kind == "lit" else Node("bin", 0, (c0, c), "+", c.site)
                merged[id(b)] = (c, b)
            return list(merged.values())
        if private and n.kind == "scale":
            return self.terms(n.args[1], _smul(coef, n.args[0]))
        return [(coef, n)]

    @staticmethod
    def fusable(n: Node, kind: str, root: Node) -> bool:
        """``n`` is a ``kind`` node that the call computing ``root`` may take in (read nowhere
        else, or the root itself)."""
        return n.kind == kind and (n is root or n.uses <= 1)

    def combine(self, terms: list[tuple[Node, Any]], root: Node) -> str:
        site = root.site
        at = next((k for k, (c, b) in enumerate(terms) if self.fusable(b, "matvec", root) and not _computed(c)),
                  None)
        if at is not None and len(terms) == 2 and _computed(terms[1 - at][0]):
            at = None
        if at is not None:
            c, b = terms[at]
            fn = "gemv" if b.data == "N" else "gemtv"
            A, x = self.tensor(b.args[0]), self.tensor(b.args[1])
            rest = terms[:at] + terms[at + 1:]
            if not rest:
                return self.emit(fn, [A, x] if _is_one(c) else [self.scalar(c), A, x], 1, site)
            if len(rest) == 1:
                beta, y = rest[0][0], self.base(rest[0][1])
            else:
                beta, y = lit(1.0, site), self.combine(rest, root)
            return self.emit(fn, [self.scalar(c), A, x, self.scalar(beta), y], 1, site)
        if len(terms) > 2:
            first = self.combine(terms[:2], root)
            return self.combine([(lit(1.0, site), _Named(first))] + terms[2:], root)
        names = [(c, self.base(b)) for c, b in terms]
        if len(names) == 1:
            (c, x), = names
            return x if _is_one(c) else self.emit("scal", [self.scalar(c), x], 1, site)
        (a, x), (b, y) = names
        if _is_one(a) and _is_one(b):
            return self.emit("vadd", [x, y], 1, site)
        if _is_one(b):
            return self.emit("axpy", [self.scalar(a), x, y], 1, site)
        if _is_one(a):
            return self.emit("axpy", [self.scalar(b), y, x], 1, site)
        return self.emit("axpby", [self.scalar(a), x, self.scalar(b), y], 1, site)

    def base(self, b) -> str:
        return b.name if isinstance(b, _Named) else self.tensor(b)

    def combine_matrix(self, terms: list[tuple[Node, Node]], root: Node) -> str:
        outers = [(c, b) for c, b in terms if self.fusable(b, "outer", root)]
        mats = [(c, b) for c, b in terms if not self.fusable(b, "outer", root)]
        for c, b in mats:
            if b.kind == "outer":
                raise TraceError("outer(u, v) used more than once: it is no value of its own here; ger computes "
                                 "A + outer(u, v) -- write the sum each time", b.site)
        if not mats:
            raise TraceError("outer(u, v) alone maps onto no library function; ger computes A + outer(u, v)",
                             outers[0][1].site)
        if all(_is_one(c) for c, _ in mats):
            M = self.base(mats[0][1])
            for _, b in mats[1:]:
                M = self.emit("madd", [M, self.base(b)], 2, root.site)
        else:       # a matrix read twice (A + (A + B) is 2 A + B): no BLAS call scales it, one map sums them
            tok = Tok("ident", "x", 0, 0)
            parts = [name_node(self.base(b)) if _is_one(c) else ("*", tok, self.scalar(c), name_node(self.base(b)))
                     for c, b in mats]
            expr = parts[0]
            for part in parts[1:]:
                expr = ("+", tok, expr, part)
            M = self.new_value(2)
            self.body.append(Statement((M,), None, (expr,), root.site))
        for c, b in outers:
            u = self.tensor(b.args[0]) if _is_one(c) else self.combine([(c, b.args[0])], b)
            M = self.emit("ger", [M, u, self.tensor(b.args[1])], 2, b.site)
        return M

    # -- the results ----------------------------------------------------------------------------------
    def result(self, n: Node) -> str:
        """The name of a computed result (a vector, matrix or scalar a call computes)."""
        return self.scalar(n)[1].text if n.rank == 0 else self.tensor(n)


class _Named:
    """A vector already computed (a partial sum of a long combination)."""
    __slots__ = ("name", "uses", "kind")

    def __init__(self, name: str):
        self.name, self.uses, self.kind = name, 2, "named"


MAX_DEPTH = 100     # operations nested deeper than this are refused (lowering recurses over them)


def _check_depth(trace: Trace) -> None:
    """Refuse, at the user's line, a traced expression nested deeper than ``MAX_DEPTH`` (as
    ``for _ in range(1000): x = x + y`` makes): lowering walks expressions recursively.  The depth
    is measured with an explicit stack, each node once."""
    depth: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(n, False) for n in trace.results]
    while stack:
        n, ready = stack.pop()
        if id(n) in depth:
            continue
        kids = [a for a in n.args if isinstance(a, Node)]
        if not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in kids if id(a) not in depth)
            continue
        depth[id(n)] = d = 1 + max((depth[id(a)] for a in kids), default=0)
        if d > MAX_DEPTH:
            raise TraceError(f"the expression is nested too deeply: more than {MAX_DEPTH} operations, each "
                             "on the result of the one before (split the work over several calls of the "
                             "function)", n.site)


def library_calls(trace: Trace, name: str) -> Lowered:
    """The program of a traced function, named ``name`` (see the module docstring)."""
    _check_depth(trace)
    low = _Lowering(trace)
    arg_of = {id(n): k for k, n in enumerate(trace.args)}
    input_names = {name for name, _ in low.inputs}
    returns: list[tuple] = []
    outputs: list[str] = []
    leaves: dict[int, tuple] = {}

    def output(name: str) -> tuple:
        if name not in outputs:
            outputs.append(name)
        return ("out", outputs.index(name))

    for n in trace.results:
        if id(n) in arg_of:
            returns.append(("arg", arg_of[id(n)]))
            continue
        if n.rank == 0 and n.kind in ("bin", "neg", "sqrt", "lit"):
            # scalar arithmetic as a result: evaluated after the call from the script's scalar
            # results and the arguments (jit.py), on the device
            for leaf in _leaves(n):
                if id(leaf) in arg_of:
                    leaves[id(leaf)] = ("arg", arg_of[id(leaf)])
                elif leaf.kind != "lit":
                    leaves[id(leaf)] = output(low.result(leaf))
            returns.append(("expr", n))
            continue
        got = low.result(n)
        if got in input_names:          # the sum of one term: an argument, returned as it came
            returns.append(("arg", next(k for s, k in low.inputs if s == got)))
        else:
            returns.append(output(got))
    if not outputs:
        raise TraceError("the function computes nothing on the GPU (it returns its arguments or arithmetic "
                         "on them only)", trace.results[0].site)
    head = f"# traced from {trace.args[0].site.file}" if trace.args else "# traced"
    program, script = program_of(trace.library, name, head, low.decls, [s for s, _ in low.inputs], low.device,
                                 low.body, outputs)
    return Lowered(script, low.inputs, low.device, returns, outputs, program, leaves, low.sizes)


def _computed(c: Node) -> bool:
    """A coefficient that reads a scalar the function computes (a dot product): a product that
    took it in would wait for that reduction, and could no longer share its pass over the matrix
    with the other products (BiCG's A p and A^T p~), so it is computed plainly instead."""
    return any(leaf.kind in ("dot", "out", "red") for leaf in _leaves(c))


def _leaves(n: Node) -> list[Node]:
    """The distinct leaves (nodes other than scalar arithmetic) of the scalar arithmetic at
    ``n``, each once, left to right.  A DAG walk with an explicit stack: ``a = a * a`` repeated
    reads ``a`` twice at every step, and walked as a tree would take 2^steps visits."""
    out: list[Node] = []
    seen: set[int] = set()
    stack = [n]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.kind in ("bin", "neg", "sqrt"):
            stack.extend(reversed(m.args))
        else:
            out.append(m)
    return out
