"""Python front end, part 3: the statements a traced function was lowered to (``frontend/calls.py``)
as the program IR, and as a script for people.

The program is built straight from the statements by the script front end's builder
(``frontend/build.py``: the same checks, the same :class:`Program`), each statement with the
user's line that made it, so an error names that line.  The script (``fn.script``) renders the
same statements, one a line with the user's line as a comment; the program's calls carry their
lines in it (``Call.line``, the CUDA's comments) and its text is the program's ``source``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import KfuseError, TraceError
from ..ir.program import Program
from ..library.schema import Library
from .build import ProgramBuilder, program_name
from .tokens import Tok
from .trace import Site


class Statement(NamedTuple):
    """``targets = function(args)``, or ``target = args[0]`` (scalar arithmetic) where
    ``function`` is None; ``args`` are expression nodes (``frontend/build.py``)."""
    targets: tuple[str, ...]
    function: str | None
    args: tuple[tuple, ...]
    site: Site


@dataclass(repr=False)
class Lowered:
    """A traced function lowered: its program, how the function's arguments and results map onto
    the program's inputs and outputs, and the script that shows it."""
    script: str
    inputs: list[tuple[str, int]]          # (program input name, argument index), declaration order
    device_scalars: list[str]
    returns: list[tuple]                   # per result: ("out", k) | ("arg", index) | ("expr", node)
    outputs: list[str]                     # the program's outputs, by name
    program: Program
    leaves: dict[int, tuple] = field(default_factory=dict)   # id(node) -> ("out", k) | ("arg", i): expr leaves
    sizes: dict[str, int] = field(default_factory=dict)      # size name -> size at trace time

    def __repr__(self) -> str:
        """The traced script (what ``fn.trace(...)`` shows at a prompt)."""
        return self.script.rstrip("\n")

    __str__ = __repr__


def name_node(name: str) -> tuple:
    """The expression node of a value by name."""
    return ("name", Tok("ident", name, 0, 0))


def text(node: tuple) -> str:
    """An expression node as script text (parsed back to the same node)."""
    kind = node[0]
    if kind in ("num", "name"):
        return node[1].text
    if kind == "neg":
        return "-" + _wrapped(node[2])
    if kind in ("sqrt", "call", "libcall"):
        return f"{node[1].text if kind != 'sqrt' else 'sqrt'}({', '.join(text(a) for a in node[2:])})"
    if kind in ("row", "col"):
        return f"{_wrapped(node[2])}[{':, None' if kind == 'row' else 'None, :'}]"
    if kind == "pow":
        return f"{_wrapped(node[2])} ** {_wrapped(node[3])}"
    return f"{_wrapped(node[2])} {kind} {_wrapped(node[3])}"


def _wrapped(node: tuple) -> str:
    t = text(node)
    return f"({t})" if not re.fullmatch(r"-?[\w.]+", t) or t.startswith("-") else t


class _Builder(ProgramBuilder):
    """The builder with errors at the user's line of the statement being built."""
    site: Site | None = None

    def error(self, msg: str, tok) -> KfuseError:
        if self.site is None:           # the declarations and the return statement: lowering's own
            return KfuseError(f"{self.name}: the traced script is refused ({msg}); the script:\n{self.src}")
        return TraceError(msg, self.site)


def program_of(library: Library, name: str, head: str, decls: dict[str, list[str]], inputs: list[str],
               device: list[str], body: list[Statement], outputs: list[str]) -> tuple[Program, str]:
    """The program of the lowered statements, and its script: ``head`` (a comment), the
    declarations (``decls``: names by type), the inputs, ``body`` and the return of ``outputs``
    (names); ``device``: the scalar inputs bound to 0-d device arrays."""
    lines = [head] + [f"{t} {', '.join(decls[t])};" for t in ("csr", "matrix", "vector", "scalar") if decls.get(t)]
    if inputs:
        lines.append(f"input {', '.join(inputs)};")
    first = len(lines) + 1              # the line of the first statement
    texts = [f"{', '.join(s.targets)} = {s.function}({', '.join(text(a) for a in s.args)});" if s.function
             else f"{s.targets[0]} = {text(s.args[0])};" for s in body]
    width = max((len(t) for t in texts), default=0)
    lines += [f"{t:<{width}}   # {s.site.short()}" for t, s in zip(texts, body)]
    lines.append(f"return {', '.join(outputs)};")
    script = "\n".join(lines) + "\n"

    b = _Builder(library, program_name(name), "<script>", script)
    line = 2
    for t in ("csr", "matrix", "vector", "scalar"):
        for n in decls.get(t, ()):
            b.declare(Tok("ident", n, line, 0), t)
        line += bool(decls.get(t))
    for n in inputs:
        b.input(Tok("ident", n, line, 0))
    for k, s in enumerate(body):
        b.site = s.site
        if s.function is None:
            b.assign([Tok("ident", s.targets[0], first + k, 0)], s.args[0])
        else:
            b.call([Tok("ident", t, first + k, 0) for t in s.targets], Tok("ident", s.function, first + k, 0),
                   list(s.args))
    b.site = None
    end = first + len(body)
    for n in outputs:
        b.return_item(("name", Tok("ident", n, end, 0)))
    b.end_return(Tok("ident", "return", end, 0))
    program = b.finish()
    return (program.with_device_scalars(device) if device else program), script
