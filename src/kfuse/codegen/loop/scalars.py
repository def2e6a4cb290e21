"""Scalar arithmetic as expressions of the loop's small kernels (``ir/loop.py``'s tuples), and the
returned arithmetic of a script or a jitted function as one ``kf_scalars`` module.

The expression builders turn the front ends' scalar results into tuples: a jitted function's or
a loop body's traced result (``expression``), a script's returned arithmetic
(``script_expression``).  Each distinct source node becomes one tuple, so the C writer
(``cexpr.c_shared``) computes an operand they share once.  ``ScalarCode`` is the returned
arithmetic's module as the runtime takes it (``ir/loop.ScalarText``): the runtime's
``control.ScalarTail`` compiles ``source(numbers)`` and launches it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.dag import post_order
from ...ir.loop import LEAVES, operands
from .control import control_source


def expression(node, leaves: dict, where, reads: list) -> tuple:
    """A traced scalar result (``frontend/trace.Node``: lit, bin, neg, sqrt over leaves; read by
    its fields only) as a scalar expression (``ir/loop.py``).  ``leaves`` maps ``id(node)`` of a leaf to
    its place (``frontend/lowered.Lowered.leaves``); ``where(place)`` says where the kernel reads it,
    and ``reads`` collects those, one pointer each, in the order of ``("leaf", k)``."""
    done: dict[int, tuple] = {}         # id(node) -> its expression: each distinct node made once
    stack = [(node, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in done:               # reached again (a = a * a reads a twice): the same tuple
            continue
        if id(n) in leaves:
            src = where(leaves[id(n)])
            if src not in reads:
                reads.append(src)
            done[id(n)] = ("leaf", reads.index(src))
        elif n.kind == "lit":
            done[id(n)] = ("num", float(n.data))
        elif not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in done)
        else:
            a = [done[id(x)] for x in n.args]
            done[id(n)] = (n.data, a[0], a[1]) if n.kind == "bin" else (n.kind, a[0])
    return done[id(node)]


def script_expression(arg, where, reads: list, done: dict | None = None) -> tuple:
    """A script's scalar arithmetic (``ir.program.ScalarArg``: values, literals, ``+ - * /``,
    ``neg``, ``sqrt``) as a scalar expression (``ir/loop.py``); ``where(value)`` says where the kernel
    reads a value, and ``reads`` collects those, one argument each, in the order of
    ``("leaf", k)``.  Operands the arithmetic shares stay shared (``cexpr.c_shared``), across the
    expressions made with one ``done`` (id of a ScalarArg node -> its expression)."""
    done = {} if done is None else done
    for n in arg.nodes():
        if id(n) in done:
            continue
        if n.op is None:
            if n.value is None:
                done[id(n)] = ("num", float(n.literal))
                continue
            src = where(n.value)
            if src not in reads:
                reads.append(src)
            leaf = ("leaf", reads.index(src))
            done[id(n)] = ("neg", leaf) if n.negate else leaf
        else:
            done[id(n)] = (n.op, *(done[id(o)] for o in n.operands))
    return done[id(arg)]


def _by_value(exprs: list, numbers: tuple[bool, ...]) -> list:
    """The expressions with the leaves ``k`` where ``numbers[k]`` read by value (operands shared,
    within one expression or between them, kept shared)."""
    done: dict[int, tuple] = {}
    for node in post_order(exprs, operands):
        if node[0] in LEAVES:
            done[id(node)] = ("value", node[1]) if node[0] == "leaf" and numbers[int(node[1])] else node
        else:
            done[id(node)] = (node[0], *(done[id(a)] for a in node[1:]))
    return [done[id(e)] for e in exprs]


@dataclass(frozen=True)
class ScalarCode:
    """Scalar arithmetic returned as results -- a jitted function's (``rr_new / rr``,
    ``kfuse.sqrt(s)``) or a script's (``return sqrt(rr), rr / bb;``) -- as the ``kf_scalars``
    module of one element type (``ir/loop.ScalarText``).  ``exprs`` are expressions over
    ``("leaf", k)``, ``reads[k]`` the place of leaf k (the front end's: ``("out", k)``,
    ``("arg", i)``, ``("in", name)``).  With ``numbers``, a leaf given as a host number (a
    script's scalar input passed as a Python number) may be passed by value (``source``)."""
    dtype: str
    exprs: tuple
    reads: tuple
    numbers: bool = False

    @property
    def results(self) -> int:
        return len(self.exprs)

    @classmethod
    def traced(cls, dtype, nodes: list, leaves: dict) -> "ScalarCode":
        """The tail of a jitted function: ``nodes`` traced scalar results, ``leaves`` maps their
        leaves to ("out", k) or ("arg", i) (``frontend/lowered.Lowered.leaves``)."""
        reads: list = []
        exprs = [expression(e, leaves, lambda place: place, reads) for e in nodes]
        return cls(np.dtype(dtype).name, tuple(exprs), tuple(reads))

    @classmethod
    def script(cls, program, dtype) -> "ScalarCode":
        """The tail of a script's returned arithmetic (``program.returned_arithmetic()``): leaves
        are the program's outputs, ("out", k), and its scalar inputs, ("in", name)."""
        out = {v.id: k for k, v in enumerate(program.outputs)}
        reads: list = []
        done: dict = {}         # operands shared between the returned expressions stay shared
        exprs = [script_expression(a, lambda v: ("out", out[v.id]) if v.id in out else ("in", v.name), reads, done)
                 for a in program.returned_arithmetic()]
        return cls(np.dtype(dtype).name, tuple(exprs), tuple(reads), numbers=True)

    def source(self, numbers: tuple[bool, ...] = ()) -> str:
        """The kf_scalars module, the leaves flagged in ``numbers`` read by value (none: every
        leaf by address)."""
        exprs = _by_value(list(self.exprs), numbers) if any(numbers) else list(self.exprs)
        return control_source(self.dtype, exprs)


__all__ = ["ScalarCode", "expression", "script_expression"]
