"""Graphs of many loop steps, launched once from the host.

A loop's state lives in two sets of buffers; a step reads one set and writes the other, so two
steps (``even``: set 0 -> set 1, ``odd``: set 1 -> set 0) bring the state back where it started
and any number of steps is a graph of step pairs.  The front end (``jit/loops.py``) gives each step
as a function that makes its launches on a stream (the program's kernels, patched for that
step's buffers, and the small kernels around them); this module only arranges them:

* ``counted``: a fixed number of steps captured into one graph;
* ``while_graph``: a whole while loop as one graph with a conditional WHILE node (CUDA 12.4 and
  later), whose body is a chunk of steps, each followed by the kernel that counts it and
  evaluates the predicate into a go flag; every launch of a step reads the flag and does nothing
  once it is 0, so the loop ends at the step that made the predicate false, odd or even, and the
  step count on the device says which buffer set holds the state:

      first(h)                       h := the flag (count < most and the predicate holds)
      WHILE h:
          step, next, step, next, ...
          again(h)                   h := the flag
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


def while_graph(stream: int, first, body, again) -> driver.GraphExec:
    """``first(h)``, then WHILE h: ``body``, ``again(h)`` -- one graph of a conditional WHILE node,
    built by capture on the private ``stream``.  ``first`` and ``again`` take (stream, handle):
    they set the handle; ``body`` takes a stream."""
    graph = driver.graph_create()
    try:
        loop = driver.conditional_handle(graph)
        inner: list = []

        def top(s: int) -> None:
            first(s, loop)
            inner.append(driver.add_conditional(s, loop, driver.COND_WHILE))
        driver.capture_into(graph, stream, top)

        def middle(s: int) -> None:
            body(s)
            again(s, loop)
        driver.capture_into(inner[0], stream, middle)
    except BaseException:
        driver.libcuda().cuGraphDestroy(graph)
        raise
    return driver.GraphExec.of(graph)
