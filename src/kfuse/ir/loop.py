"""A device loop as the compiler hands it to the runtime: an immutable ``LoopArtifact`` (the
body's program and its ``Resolve``, the element type, how each state entry of the next step is
made, and the writer of the loop's CUDA text), and the pure descriptions both sides read -- the
scalar expressions of the small kernels, the step kernels and the shapes of the persistent and
merged kernels, and the layouts of their argument structs.

Why here: the runtime (``runtime/loop.py``, ``persistent.py``, ``merged.py``, ``control.py``)
launches what the compiler's code generation (``codegen/loop/``) writes, and neither imports the
other.  A shape is decided by the runtime (which kernels, which clears where, read from the bound
launches) and written out by code generation; an argument struct is laid out once, here, as data
(``Layout``): code generation writes its C members from it, the runtime fills the ctypes struct
made from it (``structure``), and the kernel's ``static_assert`` checks that both agree.

Scalar expressions are small trees of tuples, built by the front ends (the returned arithmetic of
a script or a jitted function, a loop body's computed entries, a while loop's traced condition):

    ("leaf", k)            the k-th pointer argument (a 0-d device array), read by address
    ("const", k)           the k-th entry of the numbers array ``cst`` (constants of the user's,
                           written before each run: a new tolerance needs no new graph)
    ("num", x)             a number written into the code
    ("value", k)           the k-th argument passed by value (a script's scalar input given as a
                           number); pointers and values share the numbering
    ("+" | "-" | "*" | "/", a, b), ("neg", a), ("sqrt", a), ("abs", a)
    ("<" | "<=" | ">" | ">=" | "==" | "!=", a, b), ("and", a, b), ("or", a, b), ("not", a)

An operand two expressions share is the same tuple (identity): the writers compute it once."""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from .artifact import Resolve
from .dag import post_order
from .program import Program

Expr = tuple                    # a scalar expression (see the module docstring)
Source = tuple                  # where a state entry or an input is read (``LoopArtifact``)
LEAVES = ("leaf", "const", "num", "value")
# blocks per multiprocessor the persistent kernel is compiled for (__launch_bounds__' second
# argument): one kernel holds every phase's code, and the compiler keeps values live across the
# step loop, so without a bound it takes ~150-200 registers a thread and one block a multiprocessor
MIN_BLOCKS = 2


# -- scalar expressions ------------------------------------------------------------------------------
def operands(node: Expr) -> tuple:
    """The operands of an expression node (none for a leaf)."""
    return () if node[0] in LEAVES else node[1:]


def counts(exprs: Sequence[Expr]) -> tuple[int, int]:
    """(arguments, numbers) the expressions read: one past the largest leaf (or value) and
    constant index."""
    p = c = 0
    for node in post_order(exprs, operands):
        if node[0] in ("leaf", "value"):
            p = max(p, int(node[1]) + 1)
        elif node[0] == "const":
            c = max(c, int(node[1]) + 1)
    return p, c


def by_value(exprs: Sequence[Expr]) -> set[int]:
    """The argument indices the expressions read by value."""
    return {int(node[1]) for node in post_order(exprs, operands) if node[0] == "value"}


# -- the step's kernels and the shapes of the kernels that run them ------------------------------------
@dataclass(frozen=True)
class Kernel:
    """A kernel of the step: its name, threads per block, shared entries and argument types
    (the ctypes types of its launch's argument block, in order)."""
    name: str
    threads: int
    smem: int
    args: tuple


@dataclass(frozen=True)
class PersistentShape:
    """What a step of the persistent kernel holds (``runtime/persistent.py`` decides it); the
    kernel text and the host's argument structs are both made from it.  ``clears``: per clear,
    (phase, late): phase k < len(kernels) runs with kernel k, len(kernels) is the tail,
    len(kernels) + 1 a phase of clears at the end; ``late``: it clears the next step's copy.
    ``tails``: scalar expressions over ``p{k}`` read from ``tail_reads`` pointers;
    ``index_late``: the fori counter advances in the last phase (a copy reads it);
    ``predicate``: a while loop's condition over ``pred_reads`` pointers; ``min_blocks``: the
    blocks per multiprocessor it is compiled for."""
    kernels: tuple[Kernel, ...]
    clears: tuple[tuple[int, bool], ...]
    copies: int
    tails: tuple
    tail_reads: int
    indexed: bool
    index_late: bool
    predicate: tuple | None
    pred_reads: int
    min_blocks: int = MIN_BLOCKS

    @property
    def tail(self) -> int:
        return len(self.kernels)

    def has_phase(self, k: int) -> bool:
        if k < self.tail:
            return True
        if k == self.tail:
            return bool(self.copies or self.tails or (self.indexed and not self.index_late)
                        or any(p == k for p, _ in self.clears))
        return (self.indexed and self.index_late) or any(p == k for p, _ in self.clears)


@dataclass(frozen=True)
class MergedShape:
    """What a merged launch holds (``runtime/merged.py`` decides it): its kernels (and the blocks
    each was launched with), and the step's work it takes in after them: ``clears`` ranges,
    ``copies``, ``tails`` (scalar expressions over ``p{k}``, read from ``tail_reads``
    pointers), the fori counter, and in a while loop the end of its step (the control module's
    kf_loop_next: ``pred`` over ``pred_reads`` pointers and, with ``consts``, the numbers array;
    ``saved`` state entries saved)."""
    kernels: tuple[Kernel, ...]
    grids: tuple[int, ...]
    clears: int = 0
    copies: int = 0
    tails: tuple = ()
    tail_reads: int = 0
    indexed: bool = False
    pred: tuple | None = None
    pred_reads: int = 0
    consts: bool = False
    saved: int = 0
    groups: tuple[int, ...] = ()      # per kernel: its blocks run side by side (groups of threads)
    block: int = 0                    # the block's threads (0: the widest kernel's)
    sizes: tuple = ()                 # per kernel: ((argument, value), ...) compiled in
    allow: bool = False               # the next launch may start at once (the next step's head waits)

    @property
    def threads(self) -> int:
        return max([k.threads for k in self.kernels] + [self.block])

    def side_by_side(self, k: int) -> int:
        return self.groups[k] if self.groups else 1


# -- argument struct layouts ---------------------------------------------------------------------------
# (field name, type): a ctypes type, or a Kernel for that kernel's argument block (a struct of its
# own, ``kernel_args``).  Code generation writes the C members from it, the runtime fills the
# ctypes struct ``structure`` makes of it.
Layout = tuple[tuple[str, Any], ...]


def real_type(dtype) -> type:
    """The ctypes type of one entry of the element type."""
    return ctypes.c_double if np.dtype(dtype).itemsize == 8 else ctypes.c_float


def kernel_layout(kern: Kernel) -> Layout:
    """A kernel's argument block: fields a0, a1, ... of its argument types."""
    return tuple((f"a{i}", t) for i, t in enumerate(kern.args))


def work_fields(dtype, clears: int, copies: int, tails: int, tail_reads: int, indexed: bool) -> Layout:
    """The fields of a step's work after its kernels: each clear (c, cn, cv), each copy (cpd,
    cps, cpn), the scalar arithmetic's outputs (o) and reads (r), the fori counter (idx)."""
    real = real_type(dtype)
    fields: list = []
    for i in range(clears):
        fields += [(f"c{i}", ctypes.c_void_p), (f"cn{i}", ctypes.c_longlong), (f"cv{i}", real)]
    for i in range(copies):
        fields += [(f"cpd{i}", ctypes.c_void_p), (f"cps{i}", ctypes.c_void_p), (f"cpn{i}", ctypes.c_longlong)]
    fields += [(f"o{k}", ctypes.c_void_p) for k in range(tails)]
    fields += [(f"r{k}", ctypes.c_void_p) for k in range(tail_reads)]
    return tuple(fields + ([("idx", ctypes.c_void_p)] if indexed else []))


def step_layout(shape: PersistentShape, dtype) -> Layout:
    """The persistent kernel's ``kf_step``: each kernel's argument block (k) and grid (g), the
    step's work (``work_fields``), the condition's pointers (q)."""
    fields: list = []
    for k, kern in enumerate(shape.kernels):
        fields += [(f"k{k}", kern), (f"g{k}", ctypes.c_longlong)]
    fields += work_fields(dtype, len(shape.clears), shape.copies, len(shape.tails), shape.tail_reads, shape.indexed)
    fields += [(f"q{k}", ctypes.c_void_p) for k in range(shape.pred_reads)]
    return tuple(fields)


def merged_layout(shape: MergedShape, dtype) -> Layout:
    """A merged kernel's argument struct: each kernel's argument block (k), the step's work
    (``work_fields``), and in a while loop the step end's control words (ctl: int*), parity
    (odd), numbers (cst), the condition's pointers (q) and saves (svd, svs, svn)."""
    fields: list = [(f"k{k}", kern) for k, kern in enumerate(shape.kernels)]
    fields += work_fields(dtype, shape.clears, shape.copies, len(shape.tails), shape.tail_reads, shape.indexed)
    if shape.pred is not None:
        fields += [("ctl", ctypes.c_void_p), ("odd", ctypes.c_int), ("cst", ctypes.c_void_p)]
        fields += [(f"q{k}", ctypes.c_void_p) for k in range(shape.pred_reads)]
        for i in range(shape.saved):
            fields += [(f"svd{i}", ctypes.c_void_p), (f"svs{i}", ctypes.c_void_p), (f"svn{i}", ctypes.c_longlong)]
    return tuple(fields)


def structure(name: str, layout: Layout) -> type[ctypes.Structure]:
    """A layout as a ctypes struct (a Kernel's field: its argument block, ``kernel_args``): the
    host's struct, laid out as the C compiler lays out the struct written from the same layout."""
    fields, k = [], 0
    for field_name, t in layout:
        if isinstance(t, Kernel):
            t, k = kernel_args(k, t), k + 1
        fields.append((field_name, t))
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def kernel_args(k: int, kern: Kernel) -> type[ctypes.Structure]:
    """A kernel's argument block as a ctypes struct (fields a0, a1, ...)."""
    return structure(f"Args{k}", kernel_layout(kern))


@functools.lru_cache(maxsize=64)
def step_struct(shape: PersistentShape, dtype) -> type[ctypes.Structure]:
    """The host's ``kf_step``."""
    return structure("KfStep", step_layout(shape, dtype))


def args_struct(shape: MergedShape, dtype, name: str) -> type[ctypes.Structure]:
    """The host's argument struct of a merged kernel."""
    return structure(name, merged_layout(shape, dtype))


# -- the loop -----------------------------------------------------------------------------------------
class LoopKernelWriter(Protocol):
    """The writer of a device loop's CUDA text (``codegen/loop.LoopWriter``), handed to the runtime
    in the ``LoopArtifact``: every text the runtime compiles for a loop comes from here."""

    def control(self, dtype: str, tails: Sequence[Expr], predicate: Expr | None, conditional: bool,
                clears: int, saved: int, carried: int) -> str:
        """The loop's control module: kf_scalars of ``tails``, the clears, the fori counter's and
        the copies' kernels, with a ``predicate`` the while loop's kernels (``conditional``:
        they set a conditional graph node's handle, the module is linked with the device
        runtime; else plain), with ``carried`` entries a run's start and end."""
        ...

    def persistent(self, shape: PersistentShape, dtype) -> str:
        """The persistent kernel ``kf_persistent`` of ``shape`` (to be wrapped by
        ``Artifact.persistent_source``)."""
        ...

    def merged(self, shape: MergedShape, dtype, name: str) -> str:
        """The merged kernel ``name`` of ``shape`` (wrapped likewise)."""
        ...

    def head(self, kernel: Kernel, sizes: tuple, name: str) -> str:
        """The kernel ``name``: a step's first kernel with ``sizes`` ((argument, value), ...)
        compiled in, which waits for the launch before it first (wrapped likewise)."""
        ...


@dataclass(frozen=True, eq=False)
class LoopArtifact:
    """A loop body compiled for one state signature, as the runtime runs it (``runtime/loop``).

    ``program``, ``dtype`` and ``resolve``: the body's program, for the runtime's executor.
    ``inputs``: (program input name, where it is read): ("leaf", j) state entry j, ("index",)
    the fori counter, ("out", k) output k.  ``outputs``: the program's output names, in order.
    ``sources[j]``: how state entry j of the next step is made -- ("keep",) read in place, ("out",
    k) the program writes it, ("copy", src) copied from ``src`` (a source as in ``inputs``),
    ("tail", t) computed by the scalar kernel (expression ``tails[t]`` over ("leaf", m): where
    ``tail_reads[m]`` is).  ``out_leaf``: (output k, the state entry it is written into);
    ``hidden``: outputs no entry takes.  ``indexed``: the body reads the fori counter.
    ``kernels``: the writer of every CUDA text of the loop.  Compared by identity."""
    program: Program
    dtype: str
    resolve: Resolve = field(repr=False)
    inputs: tuple[tuple[str, Source], ...]
    outputs: tuple[str, ...]
    sources: tuple[Source, ...]
    out_leaf: tuple[tuple[int, int], ...]
    hidden: tuple[int, ...]
    tails: tuple[Expr, ...]
    tail_reads: tuple[Source, ...]
    indexed: bool
    kernels: LoopKernelWriter = field(repr=False)

    def input_source(self, name: str) -> Source:
        """Where the program input ``name`` is read."""
        return dict(self.inputs)[name]

    def leaf_of(self, k: int) -> int | None:
        """The state entry output ``k`` is written into (None: a hidden output)."""
        return dict(self.out_leaf).get(k)


class ScalarText(Protocol):
    """Returned scalar arithmetic as one ``kf_scalars`` module (``codegen/loop/scalars.ScalarCode``),
    handed to the runtime's ``control.ScalarTail``: ``results`` expressions over ``reads``
    (the front end's places: ("out", k), ("arg", i), ("in", name)); with ``numbers``, a read
    given as a host number may be passed by value."""

    @property
    def dtype(self) -> str: ...

    @property
    def reads(self) -> tuple: ...

    @property
    def results(self) -> int: ...

    @property
    def numbers(self) -> bool: ...

    def source(self, numbers: tuple[bool, ...] = ()) -> str:
        """The module, the reads flagged in ``numbers`` passed by value (none: all by address)."""
        ...


__all__ = ["Expr", "Kernel", "LEAVES", "Layout", "LoopArtifact", "LoopKernelWriter", "MIN_BLOCKS", "MergedShape",
           "PersistentShape", "ScalarText", "Source", "args_struct", "by_value", "counts", "kernel_args",
           "kernel_layout", "merged_layout", "operands", "real_type", "step_layout", "step_struct", "structure",
           "work_fields"]
