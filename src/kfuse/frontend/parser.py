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

import re
from pathlib import Path

from ..errors import ScriptError
from ..library import ewexpr
from ..library.schema import Library
from ..ir.program import Program
from .build import ELEMENTWISE_NAMES, RANKS, ProgramBuilder, program_name
from .tokens import KEYWORDS, Tok, tokenize

MAX_SIZE = 2 ** 48     # a literal size: far beyond any GPU's memory, well inside int64 index arithmetic
MAX_NESTING = 100      # parentheses and sqrt( nested deeper than this are refused (the parser recurses)


class _Parser(ProgramBuilder):
    """The syntax: tokens to statements, each handed to the builder (``frontend/build.py``).
    A recursive-descent parser: one method per rule of the grammar, hence their number."""

    def __init__(self, src: str, file: str, library: Library, name: str):
        super().__init__(library, name, file, src)
        self.lines = src.split("\n")
        self.toks = tokenize(src, file)
        self.pos = 0

    # -- helpers -----------------------------------------------------------------------
    def error(self, msg: str, tok) -> ScriptError:
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

    # -- statements ----------------------------------------------------------------------
    TYPES = {"scalar": "scalar", "vector": "vector", "matrix": "matrix", "csr": "csr"}

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
                for name in self.names("an input name"):
                    self.input(name)
                self.expect(";")
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
            self.check_new(tok)
            ndims = RANKS[vtype]
            dims: list[int] | None = None
            if self.peek().text == "[":
                open_tok = self.next()
                dims = []
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
                if vtype == "csr" and len(dims) == 2:       # csr A[m, n]: its non-zeros its own size
                    dims.append(self.new_dim(f"{tok.text}.nnz"))
                if len(dims) != ndims:
                    raise self.error(f"a {vtype} has {ndims} sizes, {len(dims)} given" if vtype != "csr" else
                                     f"a csr matrix has 2 sizes (rows, columns) or 3 (and non-zeros), "
                                     f"{len(dims)} given", open_tok)
            self.declare(tok, vtype, dims)
            if self.peek().text != ",":
                break
            self.next()
        self.expect(";")

    def return_statement(self, ret: Tok) -> None:
        while True:
            self.return_item(self.expression("a value to return"))
            if self.peek().text != ",":
                break
            self.next()
        self.expect(";")
        self.end_return(ret)

    def assignment(self) -> None:
        targets = self.names("a name to assign")
        self.expect("=")
        node = self.expression("an expression")
        self.expect(";")
        self.assign(targets, node)

    # -- expressions -------------------------------------------------------------------------
    # A node is ("num", tok), ("name", tok), ("neg", tok, node), ("sqrt", tok, node),
    # (op, tok, left, right) with op one of + - * / ** (as "pow") or a comparison, ("call", tok,
    # *args) (an elementwise function or a reduction: frontend/ewbuild.py), ("libcall", tok, *args)
    # (a library function), ("row", tok, v) / ("col", tok, v) (v[:, None], v[None, :]); tok is
    # where the node starts.  Sums and products are parsed in loops and turned into arguments by
    # an explicit stack (the builder's ``scalar``); only parentheses and calls recurse, at most
    # MAX_NESTING deep.
    def expression(self, what: str, depth: int = 0) -> tuple:
        node = self.additive(what, depth)
        if self.peek().text in ewexpr.COMPARE:
            op = self.next().text
            node = (op, node[1], node, self.additive(what, depth))
        return node

    def additive(self, what: str, depth: int) -> tuple:
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
        if self.peek().text == "**":         # -x ** 2 is -(x ** 2), as in Python
            tok = self.next()
            if depth >= MAX_NESTING:
                raise self.error(f"expressions nested too deeply (more than {MAX_NESTING} levels)", tok)
            node = ("pow", node[1], node, self.unary(what, depth + 1))
        for tok in reversed(signs):
            node = ("neg", tok, node)
        return node

    def atom(self, what: str, depth: int) -> tuple:
        tok = self.next()
        calls = tok.kind == "ident" and tok.text not in KEYWORDS and self.peek().text == "(" \
            and tok.text not in self.decls
        if (tok.text == "(" or calls) and depth >= MAX_NESTING:
            raise self.error(f"parentheses nested too deeply (more than {MAX_NESTING} levels)", tok)
        if tok.text == "(":
            node = self.expression(what, depth + 1)
            self.expect(")")
            return node
        if tok.kind == "num":
            return ("num", tok)
        if tok.kind != "ident" or tok.text in KEYWORDS:
            raise self.error(f"expected {what}, found {tok.text!r}", tok)
        if calls:
            self.next()
            args: list[tuple] = []
            if self.peek().text != ")":
                while True:
                    args.append(self.expression("an argument", depth + 1))
                    if self.peek().text != ",":
                        break
                    self.next()
            self.expect(")")
            if self.lib.overloads(tok.text):
                return ("libcall", tok, *args)
            if tok.text == "sqrt" and len(args) == 1:
                return ("sqrt", tok, args[0])
            if tok.text in ELEMENTWISE_NAMES:
                return ("call", tok, *args)
            return ("libcall", tok, *args)      # unknown: the builder's error names close matches
        if self.peek().text == "[" and tok.text in self.decls:
            return self.broadcast(tok)
        return ("name", tok)

    def broadcast(self, tok: Tok) -> tuple:
        """``v[:, None]`` (a vector along a matrix's rows: entry i in row i) or ``v[None, :]``."""
        self.next()
        first = self.next()
        self.expect(",")
        second = self.next()
        self.expect("]")
        if (first.text, second.text) == (":", "None"):
            return ("row", tok, ("name", tok))
        if (first.text, second.text) == ("None", ":"):
            return ("col", tok, ("name", tok))
        raise self.error("a vector is indexed only to broadcast it: v[:, None] or v[None, :]", first)


def parse_script(source: str, library: Library, file: str = "<script>", name: str | None = None) -> Program:
    """Parse script text into a :class:`Program` (raises :class:`ScriptError`)."""
    if name is None:
        name = Path(file).stem if file != "<script>" else "script"
    name = program_name(name)
    source = source.removeprefix("\ufeff")         # a UTF-8 byte-order mark is no part of the script
    # old Mac line ends (a lone CR) end lines too: read as white space, they made the file one line,
    # a comment ran to its end and errors showed the whole file as their line
    source = re.sub(r"\r(?!\n)", "\n", source) if "\r" in source else source
    return _Parser(source, file, library, name).parse()
