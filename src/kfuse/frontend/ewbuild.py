"""Expression statements: ``z = x * y + 2.0 * exp(w);``, ``s = sum(abs(r));``, ``B = 2.0 * A;``.

The builder's half of ordinary array code (``frontend/build.py`` mixes it in).  An assignment
whose right side is an expression over vectors and matrices becomes calls of synthesized
functions (``library/synth.py``):

* each reduction (``sum``, ``max``, ``min``, ``mean``) becomes a reduce call of its argument's
  expression, into a scalar the rest reads as any dot's result; a library call inside an
  expression (``exp(gemv(A, x))``) is made first, into a value of its own;
* what is left is scalar arithmetic (``+ - * /``, unary ``-``, ``sqrt``), kept as today; or an
  elementwise expression, one map call over its leaves: vectors and matrices by name, a vector
  broadcast along a matrix's rows (``d[:, None]``) or columns (``v[None, :]``, or a bare vector
  beside a matrix, as NumPy broadcasts it), and scalars -- the largest scalar arithmetic
  subexpressions, as scalar arguments (so ``a / b * x`` and ``c * x`` are one function).

Nodes (besides the scalar ones of ``build.py``): ``("call", tok, *args)`` (``tok.text`` an
elementwise function or a reduction), ``("libcall", tok, *args)`` (a library function),
``("pow", tok, base, exponent)``, ``(cmp, tok, a, b)`` for a comparison, ``("row", tok, v)`` and
``("col", tok, v)`` (``v[:, None]``, ``v[None, :]``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import KfuseError
from ..library import ewexpr, synth
from .tokens import Tok


def walk(node: tuple):
    """The nodes of a builder's expression (``build.py``, this module), by an explicit stack (sums
    of thousands of terms are flat)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(k for k in n[2:] if isinstance(k, tuple))


SCALAR_OPS = ("num", "name", "neg", "sqrt", "+", "-", "*", "/")    # what a ScalarArg computes
MAX_NODES = 1000        # an elementwise expression's nodes (its walks recurse; its C is one line)
REDUCTIONS = synth.REDUCTIONS
TYPE_RANK = {"scalar": 0, "vector": 1, "matrix": 2, "csr": 3}


class ElementwiseStatements:
    """The expression statements of :class:`ProgramBuilder` (a mixin: it uses the builder's
    declarations, values, ``call`` and ``scalar_assignment``)."""

    decls: dict
    arith: dict
    current: dict
    _temps: int = 0
    _line: int = 0

    def error(self, msg: str, tok: Any) -> KfuseError:
        raise NotImplementedError

    if TYPE_CHECKING:       # the builder's own (frontend/build.py)
        from ..library.schema import Function, Library
        lib: Library

        def call(self, targets: list, fn_tok: Any, args: list[tuple], function: Function | None = None) -> None: ...
        def lookup_decl(self, tok: Any) -> tuple: ...
        def scalar_assignment(self, target: Any, node: tuple) -> None: ...
        def declare(self, tok: Any, vtype: str, dims: list[int] | None = None) -> None: ...

    # -- the statement -------------------------------------------------------------------------
    def assign(self, targets: list, node: tuple) -> None:
        """``targets = node``: a library call, scalar arithmetic, or an expression statement."""
        if node[0] == "libcall":
            self._line = targets[0].line
            self.call(targets, node[1], [a if self._scalar_arithmetic(a) else
                                         self._operand(self._hoist(self._bounded(a))) for a in node[2:]])
            return
        if len(targets) != 1:
            raise self.error(f"an expression has one value, {len(targets)} names are assigned", targets[0])
        target = targets[0]
        self._line = target.line            # the calls it makes are on the statement's line
        if self._scalar_arithmetic(node):   # however long: no recursion here
            self._assign_scalar(target, node)
            return
        self._bounded(node)
        if node[0] == "call" and ((node[1].text in REDUCTIONS and node[1].text != "mean"
                                   and self.decls.get(target.text, ("",))[0] == "scalar")
                                  or (node[1].text in synth.AXIS_SUMS
                                      and self.decls.get(target.text, ("",))[0] == "vector")):
            self._hoist(node, into=target)     # s = sum(...): the reduction's result is s itself
            return
        node = self._hoist(node)
        rank = self._rank(node)
        if rank == 0:
            bad = _first_not_scalar(node)
            if bad is not None:
                what = "** of a scalar" if bad[0] == "pow" else "a comparison of scalars" if bad[0] in ewexpr.COMPARE \
                    else f"{bad[1].text}(...) of a scalar"
                raise self.error(f"{what}: elementwise functions and operators take vectors and matrices; "
                                 "scalar arithmetic is + - * /, unary - and sqrt (write t * t for t ** 2)", bad[1])
            self._assign_scalar(target, node)
            return
        declared = self.decls.get(target.text, ("",))[0]
        if declared == "scalar":
            raise self.error(f"{target.text} is a scalar; the expression is a {['', 'vector', 'matrix'][rank]}",
                             target)
        self._map(node, rank, [target])

    def _assign_scalar(self, target, node: tuple) -> None:
        """``target = node``, scalar arithmetic: the target must be a declared scalar."""
        vtype = self.lookup_decl(target)[0]
        if vtype != "scalar":
            raise self.error(f"{target.text} is a {vtype}; the expression is a scalar", target)
        self.scalar_assignment(target, node)

    # -- reductions and library calls inside an expression -----------------------------------------
    def _hoist(self, node: tuple, into=None) -> tuple:
        """``node`` with its reductions and library calls made (each a call of its own) and
        replaced by the names of their results (``into``: the name a reduction at the root
        assigns)."""
        kind = node[0]
        if kind in ("num", "name"):
            return node
        kids = [self._hoist(k) for k in node[2:]]
        tok = node[1]
        if kind == "libcall":
            fns = self.lib.overloads(tok.text)
            fn = next((f for f in fns if len(f.inputs) == len(kids)), None)
            if fn is not None and len(fn.outputs) != 1:
                raise self.error(f"{tok.text} returns {len(fn.outputs)} values: call it in a statement of its own "
                                 "to name them", tok)
            out = self._temp(fn.outputs[0].type if fn is not None else "vector", tok)
            self.call([out], tok, [self._operand(k) for k in kids])
            return ("name", out)
        if kind == "call" and tok.text in synth.AXIS_SUMS:
            (arg,) = kids
            if self._rank(arg) != 2:
                raise self.error(f"{tok.text} takes a matrix expression", tok)
            expr, kinds, args = self._leaves(arg, 2)
            try:
                fn = synth.synthesize(expr, kinds, tok.text)
            except KfuseError as e:
                raise self.error(str(e), tok) from None
            out = into if into is not None else self._temp("vector", tok)
            self.call([out], self._named(tok, fn.name), args, function=fn)
            return ("name", out)
        if kind == "call" and tok.text in REDUCTIONS:
            (arg,) = kids
            r = self._rank(arg)
            if r != 1:
                raise self.error(f"{tok.text} takes a vector expression, got a "
                                 f"{['scalar', 'vector', 'matrix'][r]} (a matrix's row or column sums are "
                                 "gemv and gemtv with a vector of ones)", tok)
            expr, kinds, args = self._leaves(arg, 1)
            carrier = self._carrier(kinds, args)
            fn = synth.synthesize(expr, kinds, tok.text, carrier)
            outs = [into] if into is not None else [self._temp("scalar", tok) for _ in fn.outputs]
            self.call(outs, self._named(tok, fn.name), args + [args[carrier]], function=fn)
            if tok.text == "mean":
                return ("/", tok, ("name", outs[0]), ("name", outs[1]))
            return ("name", outs[0])
        return (kind, tok, *kids)

    def _carrier(self, kinds: tuple[str, ...], args: list[tuple]) -> int:
        """The input whose length bounds a reduction (``library/synth.py``): a program input
        where one is read (complete before any kernel, so the reduction still fuses with the
        producers of the others), else the first vector."""
        vectors = [k for k, kind in enumerate(kinds) if kind == "vector"]
        inputs = [k for k in vectors if args[k][0] == "name" and args[k][1].text in self.current
                  and self.current[args[k][1].text].is_input]
        return (inputs or vectors)[0]

    def _scalar_arithmetic(self, node: tuple) -> bool:
        """``node`` is arithmetic of scalars only (what a ScalarArg computes), found without
        recursion: scalar arguments and assignments of thousands of terms stay as they were."""
        nodes = list(walk(node))
        return all(n[0] in SCALAR_OPS for n in nodes) and all(self._name_rank(n[1], csr=True) == 0 for n in nodes
                                                               if n[0] == "name")

    def _bounded(self, node: tuple) -> tuple:
        """``node``, refused if it has more nodes than the recursive walks below take."""
        if sum(1 for _ in walk(node)) > MAX_NODES:
            raise self.error(f"an expression of vectors of more than {MAX_NODES} operations and operands: split it "
                             "over several statements", node[1])
        return node

    def _name_rank(self, tok, csr: bool = False) -> int:
        """A name's rank (0 scalar, 1 vector, 2 matrix; ``csr``: 3 for a CSR matrix, else an
        error: elementwise code never reads one)."""
        if tok.text in self.arith:
            return 0
        vtype = self.lookup_decl(tok)[0]
        if vtype == "csr" and not csr:
            raise self.error(f"{tok.text} is a CSR matrix: it is read by spmv (A @ x) only", tok)
        return TYPE_RANK[vtype]

    def _operand(self, node: tuple) -> tuple:
        """An argument of a library call: an expression of vectors made into a value first."""
        if node[0] == "name" or self._rank(node) == 0:
            return node
        rank = self._rank(node)
        out = self._temp(["scalar", "vector", "matrix"][rank], node[1])
        self._map(node, rank, [out])
        return ("name", out)

    def _named(self, tok, name: str) -> Tok:
        """A synthesized function's name as the token of its call, on the statement's line."""
        return Tok("ident", name, tok.line or self._line, tok.col)

    def _temp(self, vtype: str, tok) -> Tok:
        """A new value's name, declared ``vtype`` (``_e1``, ``_e2`` ...: no script name starts so)."""
        while True:
            self._temps += 1
            name = f"_e{self._temps}"
            if name not in self.decls:
                break
        out = Tok("ident", name, tok.line or self._line, tok.col)
        self.declare(out, vtype)
        return out

    # -- ranks -------------------------------------------------------------------------------------
    def _rank(self, node: tuple) -> int:
        kind, tok = node[0], node[1]
        if kind == "num":
            return 0
        if kind == "name":
            return self._name_rank(tok)
        if kind in ("row", "col"):
            if self._rank(node[2]) != 1:
                raise self.error("[:, None] and [None, :] broadcast a vector", tok)
            return 2
        if kind == "call" and tok.text in REDUCTIONS:
            return 0
        if kind == "call" and tok.text in synth.AXIS_SUMS:
            return 1
        ranks = [self._rank(k) for k in node[2:]]
        return max(ranks, default=0)

    # -- the map --------------------------------------------------------------------------------------
    def _map(self, node: tuple, rank: int, targets: list) -> None:
        expr, kinds, args = self._leaves(node, rank)
        try:
            fn = synth.synthesize(expr, kinds)
        except KfuseError as e:
            raise self.error(str(e), node[1]) from None
        self.call(targets, self._named(node[1], fn.name), args, function=fn)

    def _leaves(self, node: tuple, rank: int) -> tuple[tuple, tuple[str, ...], list[tuple]]:
        """The expression over numbered inputs, the inputs' kinds, and their argument nodes."""
        kinds: list[str] = []
        args: list[tuple] = []
        seen: dict[Any, int] = {}

        def leaf(kind: str, arg: tuple, key) -> tuple:
            if key not in seen:
                seen[key] = len(kinds)
                kinds.append(kind)
                args.append(arg)
            return ("in", seen[key])

        def walk(n: tuple) -> tuple:
            kind, tok = n[0], n[1]
            if kind == "num":
                return ("num", float(tok.text))
            if self._rank(n) == 0 and _first_not_scalar(n) is None and _has_name(n):
                return leaf("scalar", n, ("s", _key(n)))
            if kind == "name":
                r = self._rank(n)
                word = {1: "col" if rank == 2 else "vector", 2: "matrix"}[r]
                return leaf(word, n, (word, tok.text))
            if kind in ("row", "col"):
                v = n[2]
                if v[0] != "name":
                    v = self._operand(v)
                return leaf(kind, v, (kind, v[1].text))
            kids = [walk(k) for k in n[2:]]
            if kind == "neg" and kids[0][0] == "num":
                return ("num", -kids[0][1])             # -2.0 is a number (x ** -2.0)
            if kind == "/" and kids[1] == ("num", 0.0):
                raise self.error("division by zero", n[3][1])
            if kind in ("neg", "sqrt") or kind in ewexpr.ARITH or kind in ewexpr.COMPARE:
                return (kind, *kids)
            if kind == "pow":
                why = ewexpr.check_power(kids[1])
                if why:
                    raise self.error(why, tok)
                return ("pow", *kids)
            if kind == "call" and tok.text in ewexpr.FUNCTIONS:
                want = ewexpr.arity(tok.text)
                if len(kids) != want:
                    raise self.error(f"{tok.text} takes {want} argument(s), {len(kids)} given", tok)
                return (tok.text, *kids)
            raise self.error(f"{tok.text}: no elementwise function of that name", tok)

        expr = walk(node)
        return expr, tuple(kinds), args


def _first_not_scalar(node: tuple):
    """The first node of ``node`` that scalar arithmetic (a ScalarArg) cannot compute, or None."""
    if node[0] not in SCALAR_OPS:
        return node
    for k in node[2:]:
        bad = _first_not_scalar(k)
        if bad is not None:
            return bad
    return None


def _has_name(node: tuple) -> bool:
    return node[0] == "name" or any(_has_name(k) for k in node[2:])


def _key(node: tuple):
    """A node's structure without positions: equal subexpressions are one input."""
    if node[0] in ("num", "name"):
        return (node[0], node[1].text)
    return (node[0], *(_key(k) for k in node[2:]))
