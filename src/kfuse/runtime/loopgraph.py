"""Graphs of many loop steps, launched once from the host.

A loop's state lives in two sets of buffers; a step reads one set and writes the other, so two
steps (``even``: set 0 -> set 1, ``odd``: set 1 -> set 0) bring the state back where it started
and any number of steps is a graph of step pairs.  The front end (``loops.py``) gives each step
as a function that makes its launches on a stream (the program's kernels, patched for that
step's buffers, and the small kernels around them); this module only arranges them:

* ``counted``: a fixed number of steps captured into one graph;
* ``while_graph``: a whole while loop as one graph of conditional nodes (CUDA 12.4 and later):

      first(h)                       sets h: count < most and the predicate holds
      WHILE h:
          even; next(h_if)           counts the step, sets h_if (and the flag) likewise
          IF h_if:
              odd; next(-)           counts the step, sets the flag
          again(h)                   h := the flag

  so a loop stops after the step that made the predicate false, odd or even, and the step count
  on the device says which buffer set holds the state.
"""
from __future__ import annotations

from . import driver


def counted(stream: int, steps: list) -> driver.GraphExec:
    """One graph of ``steps`` (functions launching on a stream), in order, captured on the
    private ``stream``."""
    def record(s: int) -> None:
        for step in steps:
            step(s)
    return driver.GraphExec(stream, record)


def while_graph(stream: int, first, even, next_even, odd, next_odd, again) -> driver.GraphExec:
    """The while loop above as one graph, built by capture on the private ``stream``.  ``first``,
    ``next_even``, ``again`` take (stream, handle) -- the handle they set; the others a stream."""
    graph = driver.graph_create()
    try:
        loop = driver.conditional_handle(graph)
        body: list = []

        def top(s: int) -> None:
            first(s, loop)
            body.append(driver.add_conditional(s, loop, driver.COND_WHILE))
        driver.capture_into(graph, stream, top)
        second = driver.conditional_handle(body[0])
        inner: list = []

        def middle(s: int) -> None:
            even(s)
            next_even(s, second)
            inner.append(driver.add_conditional(s, second, driver.COND_IF))
            again(s, loop)
        driver.capture_into(body[0], stream, middle)

        def last(s: int) -> None:
            odd(s)
            next_odd(s)
        driver.capture_into(inner[0], stream, last)
    except BaseException:
        driver.libcuda().cuGraphDestroy(graph)
        raise
    return driver.GraphExec.of(graph)
