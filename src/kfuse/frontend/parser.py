"""Script front end: the syntax of the paper's Listing 1.

    matrix A[m, n];            # declarations: scalar, vector, matrix (subvector32, TILE32x32 too)
    vector p[n], q, r, s;      #   optional [dims]: names or integers shared across declarations
    scalar alpha;
    input A, p, r, alpha;
    q = gemv(alpha, A, p);     # calls into the library; scalars may be literals or -name
    s = gemtv(A, r);
    beta = alpha / 2;          # scalar arithmetic (+ - * /, unary -, sqrt) on scalars: evaluated
    t = axpy(sqrt(beta), q, s);  #   on the device, inline in each kernel that uses it
    return q, t, sqrt(beta);   # returned arithmetic: one small kernel after the plan
"""
from __future__ import annotations

import difflib
import math
import re
from pathlib import Path

from ..errors import ScriptError
from ..library.schema import AXES, Library
from ..ir.program import SIZE_WORDS, Call, Dim, Program, ScalarArg, Value
from .tokens import KEYWORDS, Tok, tokenize

MAX_SIZE = 2 ** 48     # a literal size: far beyond any GPU's memory, well inside int64 index arithmetic
MAX_NESTING = 100      # parentheses and sqrt( nested deeper than this are refused (the parser recurses)


class _Parser:
    def __init__(self, src: str, file: str, library: Library, name: str):
        self.src, self.file, self.lib, self.name = src, file, library, name
        self.lines = src.split("\n")
        self.toks = tokenize(src, file)
        self.pos = 0
        self.decls: dict[str, tuple[str, tuple[int, ...], Tok]] = {}   # name -> (type, dims, tok)
        self.inputs: dict[str, Tok] = {}
        self.current: dict[str, Value] = {}      # name -> latest value
        self.arith: dict[str, ScalarArg] = {}    # scalar name -> its arithmetic, when assigned one last
        self.values: list[Value] = []
        self.labels: set[str] = set()       # labels of the values so far (and their names)
        self.suffix: dict[str, int] = {}    # name -> the next number to try for a label name_N
        self.calls: list[Call] = []
        self.outputs: list[Value] | None = None
        self.returns: tuple[Value | ScalarArg, ...] = ()    # set when the return statement has arithmetic
        self.parent: list[int] = []              # union-find over dimension ids
        self.dim_info: list[tuple[str, int | None, bool]] = []   # name, literal, declared
        self.named_dims: dict[str, int] = {}

    # -- helpers -----------------------------------------------------------------------
    def error(self, msg: str, tok: Tok) -> ScriptError:
        text = self.lines[tok.line - 1] if 0 < tok.line <= len(self.lines) else ""
        return ScriptError(msg, self.file, tok.line, tok.col, text)

    def peek(self) -> Tok:
        return self.toks[self.pos]

    def next(self) -> Tok:
        tok = self.toks[self.pos]
        self.pos += 1
        return tok

    def expect(self, text: str | None = None, kind: str | None = None, what: str = "") -> Tok:
        tok = self.next()
        if (text is not None and tok.text != text) or (kind is not None and tok.kind != kind) \
                or (kind == "ident" and tok.text in KEYWORDS):
            want = what or (repr(text) if text else kind)
            raise self.error(f"expected {want}, found {tok.text!r}", tok)
        return tok

    def names(self, what: str) -> list[Tok]:
        out = [self.expect(kind="ident", what=what)]
        while self.peek().text == ",":
            self.next()
            out.append(self.expect(kind="ident", what=what))
        return out

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

    def unify(self, a: int, b: int, what: str, tok: Tok) -> None:
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

    # -- statements ----------------------------------------------------------------------
    TYPES = {"scalar": "scalar", "vector": "vector", "matrix": "matrix"}

    def script_type(self, tok: Tok) -> str | None:
        t = tok.text
        if t in self.TYPES:
            return self.TYPES[t]
        m = re.fullmatch(r"subvector(\d+)", t)
        if m:
            if int(m.group(1)) != self.lib.subvector:
                raise self.error(f"{t}: this library's vectors are made of {self.lib.subvector}-entry "
                                 "subvectors", tok)
            return "vector"
        m = re.fullmatch(r"TILE(\d+)x(\d+)", t, re.IGNORECASE)
        if m:
            if (int(m.group(1)), int(m.group(2))) != tuple(self.lib.tile):
                raise self.error(f"{t}: this library's matrices are made of "
                                 f"{self.lib.tile[0]}x{self.lib.tile[1]} tiles", tok)
            return "matrix"
        return None

    def parse(self) -> Program:
        while self.peek().kind != "eof":
            tok = self.peek()
            if tok.kind != "ident":
                raise self.error(f"expected a statement, found {tok.text!r}", tok)
            if self.outputs is not None:
                raise self.error("statement after return", tok)
            vtype = self.script_type(tok)
            if vtype:
                self.next()
                self.declaration(vtype)
            elif tok.text == "input":
                self.next()
                self.input_statement()
            elif tok.text == "return":
                self.next()
                self.return_statement(tok)
            else:
                self.assignment()
        if self.outputs is None:
            raise self.error("the script has no return statement", self.peek())
        return self.finish()

    def declaration(self, vtype: str) -> None:
        while True:
            tok = self.expect(kind="ident", what="a name to declare")
            if tok.text in self.decls:
                prev = self.decls[tok.text][2]
                raise self.error(f"{tok.text} is already declared (line {prev.line})", tok)
            ndims = {"scalar": 0, "vector": 1, "matrix": 2}[vtype]
            dims: list[int] = []
            if self.peek().text == "[":
                open_tok = self.next()
                while True:
                    d = self.next()
                    if d.kind == "ident":
                        dims.append(self.new_dim(d.text, declared=True))
                    elif d.kind == "num" and d.text.isdigit() and d.text.strip("0"):
                        digits = d.text.lstrip("0")     # int() refuses over 4,300 digits: length first
                        if len(digits) > 15 or int(digits) > MAX_SIZE:
                            raise self.error(f"the size {d.text:.40} is too large (at most 2^48 entries "
                                             "along an axis)", d)
                        dims.append(self.new_dim(d.text, literal=int(digits), declared=True))
                    else:
                        raise self.error("a size is a name or a positive integer", d)
                    if self.peek().text != ",":
                        break
                    self.next()
                self.expect("]")
                if len(dims) != ndims:
                    raise self.error(f"a {vtype} has {ndims} sizes, {len(dims)} given", open_tok)
            else:
                suffixes = SIZE_WORDS[ndims]
                dims = [self.new_dim(f"{tok.text}.{s}") for s in suffixes]
            self.decls[tok.text] = (vtype, tuple(dims), tok)
            if self.peek().text != ",":
                break
            self.next()
        self.expect(";")

    def lookup_decl(self, tok: Tok):
        if tok.text not in self.decls:
            close = difflib.get_close_matches(tok.text, list(self.decls), 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise self.error(f"{tok.text} is not declared{hint}", tok)
        return self.decls[tok.text]

    def input_statement(self) -> None:
        for tok in self.names("an input name"):
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
        self.expect(";")

    def return_statement(self, ret: Tok) -> None:
        """Values by name, and scalar arithmetic (computed after the plan by one small kernel),
        whose computed scalars become outputs too: outputs are known by name, so one each."""
        outs: list[Value] = []
        items: list[Value | ScalarArg] = []
        while True:
            node = self.expression("a value to return")
            tok = node[1]
            if node[0] == "name" and tok.text not in self.arith:
                self.lookup_decl(tok)
                if tok.text in self.current and self.current[tok.text].is_input:
                    raise self.error(f"{tok.text} is an input; return values the script computes", tok)
                if tok.text not in self.current:
                    raise self.error(f"{tok.text} is returned but never assigned", tok)
                if self.current[tok.text] in items:
                    raise self.error(f"{tok.text} is returned twice", tok)
                items.append(self.current[tok.text])
                reads = [self.current[tok.text]]
            else:
                arg = self.scalar(node)
                items.append(arg)
                reads = [v for v in arg.values() if not v.is_input]
            for v in (v for v in reads if v not in outs):
                same = [o for o in outs if o.name == v.name] + [v]
                if len(same) > 1:
                    lines = [next(c.line for c in self.calls if o in c.outputs) for o in sorted(same, key=lambda o: o.id)]
                    raise self.error(f"the returned values read two values named {v.name}: the one assigned on line "
                                     f"{lines[0]} and the one assigned on line {lines[1]}; outputs are known by name: "
                                     "assign one of them to another name", tok)
                outs.append(v)
            if self.peek().text != ",":
                break
            self.next()
        self.expect(";")
        if not outs:
            raise self.error("the script returns nothing its calls compute (return a value a call assigns, "
                             "or arithmetic that reads one)", ret)
        self.outputs = outs
        if any(isinstance(r, ScalarArg) for r in items):
            self.returns = tuple(items)

    def assignment(self) -> None:
        targets = self.names("a name to assign")
        self.expect("=")
        first = self.peek()
        if (len(targets) == 1 and targets[0].text in self.decls and self.decls[targets[0].text][0] == "scalar"
                and not (first.kind == "ident" and first.text != "sqrt" and self.toks[self.pos + 1].text == "(")):
            node = self.expression("a scalar expression")
            self.expect(";")
            self.scalar_assignment(targets[0], node)
            return
        fn_tok = self.expect(kind="ident", what="a function name")
        self.expect("(")
        args: list[tuple] = []          # expression nodes (see ``atom``)
        if self.peek().text != ")":
            while True:
                args.append(self.expression("an argument"))
                if self.peek().text != ",":
                    break
                self.next()
        self.expect(")")
        self.expect(";")
        self.call(targets, fn_tok, args)

    # -- scalar expressions ------------------------------------------------------------------
    # A node is ("num", tok), ("name", tok), ("neg", tok, node), ("sqrt", tok, node) or
    # (op, tok, left, right) with op one of + - * /; tok is where the node starts.  Sums and
    # products are parsed in loops and turned into arguments by an explicit stack; only
    # parentheses and sqrt recurse, at most MAX_NESTING deep.
    def expression(self, what: str, depth: int = 0) -> tuple:
        node = self.term(what, depth)
        while self.peek().text in ("+", "-"):
            op = self.next().text
            node = (op, node[1], node, self.term(what, depth))
        return node

    def term(self, what: str, depth: int) -> tuple:
        node = self.unary(what, depth)
        while self.peek().text in ("*", "/"):
            op = self.next().text
            node = (op, node[1], node, self.unary(what, depth))
        return node

    def unary(self, what: str, depth: int) -> tuple:
        signs = []
        while self.peek().text == "-":
            signs.append(self.next())
        node = self.atom(what, depth)
        for tok in reversed(signs):
            node = ("neg", tok, node)
        return node

    def atom(self, what: str, depth: int) -> tuple:
        tok = self.next()
        opens = tok.text == "(" or (tok.text == "sqrt" and self.peek().text == "(" and "sqrt" not in self.decls)
        if opens and depth >= MAX_NESTING:
            raise self.error(f"parentheses nested too deeply (more than {MAX_NESTING} levels)", tok)
        if tok.text == "(":
            node = self.expression(what, depth + 1)
            self.expect(")")
            return node
        if tok.kind == "num":
            return ("num", tok)
        if tok.kind != "ident" or tok.text in KEYWORDS:
            raise self.error(f"expected {what}, found {tok.text!r}", tok)
        if opens:
            self.next()
            node = self.expression(what, depth + 1)
            self.expect(")")
            return ("sqrt", tok, node)
        return ("name", tok)

    def scalar(self, root: tuple) -> ScalarArg:
        """A scalar expression node as a ScalarArg (names looked up, types checked)."""
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

    def scalar_assignment(self, target: Tok, node: tuple) -> None:
        self.arith[target.text] = self.scalar(node)
        self.current.pop(target.text, None)

    def call(self, targets: list[Tok], fn_tok: Tok, args: list[tuple]) -> None:
        overloads = self.lib.overloads(fn_tok.text)
        if not overloads:
            names = sorted({n for f in self.lib.functions for n in (f.name, *f.aliases)})
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

    def finish(self) -> Program:
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
        assert self.outputs is not None         # checked by parse(): a script returns
        memo: dict = {}         # operands the returned arithmetic shares stay shared
        returns = tuple(values[r.id] if isinstance(r, Value) else r.remap(lambda v: values[v.id], memo)
                        for r in self.returns)
        return Program(self.name, self.src, self.file, values, tuple(v for v in values if v.is_input),
                       tuple(values[v.id] for v in self.outputs), calls, dims, self.lib.digest,
                       dim_of={d: d for d in range(len(dims))}, returns=returns)


def parse_script(source: str, library: Library, file: str = "<script>", name: str | None = None) -> Program:
    """Parse script text into a :class:`Program` (raises :class:`ScriptError`)."""
    if name is None:
        name = Path(file).stem if file != "<script>" else "script"
    name = re.sub(r"\W", "_", name) or "script"
    source = source.removeprefix("\ufeff")         # a UTF-8 byte-order mark is no part of the script
    return _Parser(source, file, library, name).parse()
