"""Walks over the builder's expression nodes (``frontend/build.py``, ``frontend/ewbuild.py``)."""
from __future__ import annotations


def walk(node: tuple):
    """The nodes of an expression, by an explicit stack (sums of thousands of terms are flat)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(k for k in n[2:] if isinstance(k, tuple))
