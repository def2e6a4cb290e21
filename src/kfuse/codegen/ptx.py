"""Block-wide barriers in PTX: which of a module's kernels can reach one.

The loader's text scan (``library/cusource.py``) reads a routine's CUDA source, and no text scan
sees through everything the preprocessor and the compiler do (string literals pasted together,
escapes in ``asm`` strings, line splices, digraph token pasting, stringification, included files,
raw strings, ``cuda::barrier``).  The PTX the compiler makes is what runs: a barrier the routine
reaches is an instruction there.  ``reached`` reads a module's PTX as PTX is defined: functions
(``.entry`` kernels, ``.func`` device functions) with bodies in braces, ``call`` instructions from
one to another (an indirect call, through a register, may reach any ``.func``), comments ignored.

Block-wide barriers: every ``bar.*`` and ``barrier.*`` instruction (``bar.sync``, ``bar.red``,
``bar.arrive``, ``barrier.sync.aligned``, ``barrier.cluster.*``: what ``__syncthreads()``,
``__syncthreads_count()``, cooperative groups' ``sync()`` and the prelude's cluster barrier become)
and every instruction on an ``mbarrier`` (``cuda::barrier``, ``cp.async.mbarrier.arrive``, bulk
copies completing on one) -- but ``bar.warp.sync``, which ``__syncwarp()`` becomes: a warp's
lanes meet there, no other warp waits, and the library allows warp-wide routines (their lanes'
exchanges: ``cusource.WARP_WIDE``), which the compiler runs with all 32 lanes of a warp.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_HEAD = re.compile(r"\.(entry|func)\s+(?:\([^()]*\)\s*)?([A-Za-z_$%][\w$]*)")
_LABEL = re.compile(r"^\s*[A-Za-z_$%][\w$]*\s*:")
_GUARD = re.compile(r"^\s*@!?%?[\w$]+\s+")
_CALL = re.compile(r"^call(?:\.\w+)*\s+(?:\([^()]*\)\s*,\s*)?([^\s,;()]+)")


def block_barrier(opcode: str) -> bool:
    """Is this PTX opcode (``bar.sync``, ``mbarrier.init.shared.b64``, ...) a block-wide (or wider)
    barrier?  ``bar.warp.sync`` is not: see the module docstring."""
    if opcode.startswith(("bar.", "barrier.")) or opcode in ("bar", "barrier"):
        return not opcode.startswith("bar.warp.")
    return "mbarrier" in opcode


@dataclass
class Function:
    kind: str                                   # entry | func
    barrier: str | None = None                  # the first block barrier in its body
    calls: set[str] = field(default_factory=set)
    indirect: bool = False                      # calls through a register (any .func)


def _statements(body: str):
    """The opcodes of a body's instructions, and the operands' text after each."""
    for stmt in re.split(r"[;{}]", body):
        stmt = _GUARD.sub("", _LABEL.sub("", stmt)).strip()
        if stmt and not stmt.startswith("."):
            yield stmt.split(None, 1)[0], stmt


def parse(ptx: str) -> tuple[dict[str, Function], list[str]]:
    """(name -> function defined in the module, the block barriers outside every function body:
    none in what a compiler writes)."""
    text = _COMMENTS.sub(" ", ptx)
    functions: dict[str, Function] = {}
    outside: list[str] = []
    depth, start, head = 0, 0, 0
    for m in re.finditer(r"[{};]", text):
        ch = m.group(0)
        if ch == "{":
            if depth == 0:
                start = m.end()
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                _add(functions, outside, text[head:start], text[start:m.start()])
                head = m.end()
        elif ch == ";" and depth == 0:
            outside += [op for op, _ in _statements(text[head:m.start()]) if block_barrier(op)]
            head = m.end()
    if depth:                                   # a body never closed: all of it counts
        _add(functions, outside, "", text[start:])
    return functions, outside


def _add(functions: dict[str, Function], outside: list[str], header: str, body: str) -> None:
    found = list(_HEAD.finditer(header))
    f = Function(found[-1].group(1)) if found else None
    for op, stmt in _statements(body):
        if block_barrier(op):
            if f is None:
                outside.append(op)
            elif f.barrier is None:
                f.barrier = op
        elif f is not None and op.startswith("call"):
            m = _CALL.match(stmt)
            target = m.group(1) if m else "%"
            if target.startswith("%"):
                f.indirect = True
            else:
                f.calls.add(target)
    if f is not None:
        functions[found[-1].group(2)] = f


def reached(ptx: str, entries: list[str], own: frozenset[str] = frozenset()) -> tuple[dict[str, str], list[str]]:
    """(entry -> the first block barrier it reaches, in its body or a function it calls, for
    each of ``entries`` that reaches one; the block barriers that no entry named reaches, in
    other functions or outside any, but in the kernels named ``own``).  An entry making an
    indirect call reaches every ``.func``."""
    functions, outside = parse(ptx)
    found: dict[str, str] = {}
    used: set[str] = set()
    for entry in entries:
        todo, seen = [entry], set()
        while todo:
            name = todo.pop()
            f = functions.get(name)
            if name in seen or f is None:
                continue
            seen.add(name)
            if f.indirect:
                todo += [n for n, g in functions.items() if g.kind == "func"]
            todo += sorted(f.calls)
        used |= seen
        first = functions[entry].barrier if entry in functions else None
        bars = [b for n in sorted(seen) if (b := functions[n].barrier)]
        if first or bars:
            found[entry] = first or bars[0]
    others = [b for n, f in functions.items() if n not in (used | own) and (b := f.barrier)]
    return found, others + outside
