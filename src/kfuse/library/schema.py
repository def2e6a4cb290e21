"""The elementary-function library as frozen dataclasses (what the loader produces)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

# higher-order kind -> nesting depth; the instance space has one axis per level
KINDS: dict[str, int] = {"map": 1, "reduce": 1, "map-map": 2, "map-reduce": 2}
AXES: dict[int, tuple[str, ...]] = {1: ("i",), 2: ("i", "j")}
LOOP_AXES = ("i", "j")   # the serial loop walks one instance axis, chosen per kernel
SCRIPT_TYPES = ("scalar", "vector", "matrix", "csr")
# a csr (compressed sparse row) matrix has no on-chip element: it is always read through its global
# view (``KfCsr``), like an input of reach "any"
ELEMENT_OF = {"scalar": "scalar", "vector": "subvector", "matrix": "tile", "csr": "csr"}
# operator -> identity (a C expression that Python's float() reads too: outputs are cleared to it)
REDUCE_OPS: dict[str, str] = {"sum": "0", "max": "-INFINITY", "min": "INFINITY"}
ACCESS_MODES = ("r", "w", "acc")            # read, write, accumulate (compiler clears first)
TRIANGLES = ("upper",)                      # a variant's ``triangle``: the tiles it walks
# what of an input an instance reads: its own element (loaded on chip), the entries around it
# (a stencil's neighbourhood), or any entry (a sparse mat-vec's gather of x); the latter two are
# read through the global view by compute routines, so the value must be complete before the
# kernel starts (fusion/legality.py)
REACHES = ("element", "neighbours", "any")
# a stencil (a map whose ``grid`` is 2 or 3) reads its neighbours-reach inputs as a grid of that
# many dimensions, x fastest (C order); entries past the grid's edges follow its boundary rule:
# "zero" reads them as 0 (homogeneous Dirichlet)
GRID_RANKS = (2, 3)
BOUNDARIES = ("zero",)
MAX_RADIUS = 4


@dataclass(frozen=True)
class Param:
    name: str
    type: str                       # scalar | vector | matrix
    dir: str                        # in | out
    index: tuple[str, ...]          # instance axes the element follows (matrix: row axis, col axis)
    hoist: bool                     # in: may be loaded before the serial loop when it does not
                                    #     follow the kernel's loop axis (TOML: invariant = false: never)
    reduce: str | None = None       # out: operator combining instances along the missing axes
    pad: int = 0                    # shared-memory padding per tile row
    partial: bool = False           # in: may be fed per-instance partial sums of a producer that
                                    #     reduces over the same axes (the routines add it linearly)
    reach: str = "element"          # in: one of REACHES
    # in, gathered: the sizes of a value that follows no instance axis, each a dimension of another
    # parameter ("A.cols": a sparse mat-vec's x is as long as A has columns); empty: by ``index``
    size: tuple[str, ...] = ()

    @property
    def gathered(self) -> bool:
        """An input read beyond the instance's own element, through its global view only."""
        return self.reach != "element"

    def follows(self, axis: str) -> bool:
        return axis in self.index

    @property
    def element(self) -> str:
        return ELEMENT_OF[self.type]

    @property
    def on_chip(self) -> bool:
        """Scalar inputs travel as kernel arguments and gathered inputs are read from global
        memory; everything else has an on-chip element."""
        return not (self.type == "scalar" and self.dir == "in") and not self.gathered


@dataclass(frozen=True)
class Local:
    """A function-private on-chip element (e.g. per-warp partial sums between compute phases)."""
    name: str
    element: str                    # scalar | subvector | tile
    shape: tuple[str | int, ...]    # entries; ints or macro names
    pad: int = 0
    buffers: int = 1                # 2: two copies, used by alternate instances along the loop axis
                                    #    (a writer of the next instance never waits for the readers
                                    #    of this one: one barrier per instance instead of two)


@dataclass(frozen=True)
class Arg:
    """One argument of a routine call, after the thread/instance index argument."""
    kind: str                       # global | element | scalar
    name: str                       # param or local name
    mode: str | None = None         # element: r | w | acc
    mapping: str | None = None      # element: a name from MAPPINGS


@dataclass(frozen=True)
class Routine:
    name: str                       # load_<param> | compute[_<suffix>] | finish_<param> | store_<param>
    kind: str                       # load | compute | finish | store
    fn: str                         # C++ function template in the variant's source
    args: tuple[Arg, ...]
    param: str | None               # the param a load/store moves
    threads: tuple[str | int, str | int]
    # a load of what the instances along another axis read again (from L2) while the variant's
    # other loads stream from memory: priced as overlapping them (the calibration times it alone)
    overlap: bool = False

    @cached_property
    def elements(self) -> tuple[Arg, ...]:
        """The element arguments (kept: the planner asks for them hundreds of thousands of times)."""
        return tuple(a for a in self.args if a.kind == "element")


@dataclass(frozen=True)
class Variant:
    name: str
    source: Path
    threads: tuple[str | int, str | int]        # X, Y threads per instance (ints or macro names)
    macros: dict[str, tuple[int, ...]]          # tunable macro -> allowed values
    instances_per_block: tuple[int, ...]        # allowed instances per block (nesting 1)
    locals: tuple[Local, ...]
    routines: tuple[Routine, ...]
    tile: tuple[str | int, str | int] | None = None     # nested: rows x columns of an instance's
                                                        # tile (ints or macros); None: the library's
    # routines that exchange values between lanes (shuffles): all 32 lanes of a warp run them
    warp_wide: frozenset[str] = frozenset()
    # instance axes the variant's tile spans whole: one instance covers every entry along them
    # (when the sizes at hand fit the tile), so a reduction over such an axis completes inside one
    # thread block and its result may be used in the kernel that computes it (fusion/legality.py)
    whole: tuple[str, ...] = ()
    # the macro whose value is the blocks of a thread-block cluster (sm_90) that together span the
    # ``whole`` axis, each block one tile of it; None: one block spans it.  Not a template
    # parameter of the routines (the views of their shared locals carry it: VP::blocks).
    cluster: str | None = None
    # every routine file the variant takes routines from, ``source`` first (one file: ``(source,)``)
    sources: tuple[Path, ...] = ()
    # another variant of the function: this one is taken only where no implementation giving the
    # call that variant fits the sizes at hand (row bands where strips of whole rows do not fit)
    fallback: str | None = None
    # "upper": the instances are only the tiles (I, J) with I <= J of a square matrix (BLAS
    # uplo = 'U'): tiles below the diagonal are never launched, and the routines of a diagonal
    # tile leave its entries below the diagonal unread.  A kernel of such a variant holds its call
    # alone and walks the upper tiles one after another (codegen/emit.py); None: every tile.
    triangle: str | None = None
    # threads a multiprocessor should hold at once (0: the compiler's choice): a kernel holding
    # the variant is compiled for that many (``__launch_bounds__``' second argument, so at most
    # 65536 / resident_threads registers a thread).  For routines whose loads wait on loads (a
    # gather through a sparse matrix's indices): more threads in flight hide the latency.
    resident_threads: int = 0

    @property
    def files(self) -> tuple[Path, ...]:
        return self.sources or (self.source,)

    @property
    def template_macros(self) -> tuple[str, ...]:
        """The macros its routines take as leading template parameters, in order."""
        return tuple(m for m in self.macros if m != self.cluster)

    def routine(self, name: str) -> Routine | None:
        return next((r for r in self.routines if r.name == name), None)

    @cached_property
    def computes(self) -> tuple[Routine, ...]:
        return tuple(r for r in self.routines if r.kind == "compute")

    @cached_property
    def loads(self) -> tuple[Routine, ...]:
        """The load routines of parameters, in order (kept: the planner schedules them by the
        thousand)."""
        return tuple(r for r in self.routines if r.kind == "load" and r.param is not None)

    @cached_property
    def stores(self) -> tuple[Routine, ...]:
        """The store routines of parameters, in order (kept likewise)."""
        return tuple(r for r in self.routines if r.kind == "store" and r.param is not None)

    def tile_shape(self, macros: dict[str, int], default: tuple[int, int]) -> tuple[int, int]:
        """Rows x columns of an instance's tile with these macro values (``default``: the
        library's, for a variant without a tile of its own)."""
        if self.tile is None:
            return default[0], default[1]
        rows, cols = (t if isinstance(t, int) else macros[t] for t in self.tile)
        return rows, cols

    def whole_extent(self, axis: str, macros: dict[str, int], default: tuple[int, int]) -> int:
        """Entries along ``axis`` that one instance of this variant covers (its tile side)."""
        rows, cols = self.tile_shape(macros, default)
        return rows if axis == "i" else cols

    def finishes(self, param: str) -> tuple[Routine, ...]:
        """The finish routines of an output: they run just before its store, where it runs."""
        got = self._finishes.get(param)
        if got is None:
            got = self._finishes[param] = tuple(r for r in self.routines if r.kind == "finish" and r.param == param)
        return got

    @cached_property
    def _finishes(self) -> dict[str, tuple[Routine, ...]]:
        """``finishes`` by parameter (memo)."""
        return {}


@dataclass(frozen=True)
class Function:
    name: str
    aliases: tuple[str, ...]
    kind: str
    doc: str
    math: str
    params: tuple[Param, ...]
    variants: tuple[Variant, ...]
    file: Path
    reference: str | None = None    # NumPy expression of the inputs (float64 checking)
    flops: str | None = None        # operations, as an expression of the params' entry counts
    grid: int = 0                   # a stencil: the rank of the grid its neighbours-reach inputs
                                    # are read as (2 or 3; 0: not a stencil)
    boundary: str = "zero"          # a stencil: what entries past the grid's edges read as (BOUNDARIES)
    radius: int = 0                 # a stencil: how far from its point it reads along each axis
    # a synthesized function (library/synth.py): (routine name, "shipped function key/routine name")
    # pairs saying which shipped function's calibrated routine prices each of its routines (its
    # loads and stores are that function's; only the arithmetic differs)
    priced_as: tuple[tuple[str, str], ...] = ()
    synthesized: bool = False       # made from an elementwise expression, not read from a library file

    @cached_property
    def nesting(self) -> int:
        return KINDS[self.kind]

    @property
    def reference_kind(self) -> str:
        """The expression kind of its reference (library/expr.py): a stencil's may call the grid
        helpers."""
        return "grid_reference" if self.grid else "reference"

    @property
    def triangle(self) -> str | None:
        """The triangle its variants walk ("upper"), or None; the loader requires every variant
        of a function to agree, so fusion rules can ask the function."""
        return self.variants[0].triangle if self.variants else None

    @property
    def axes(self) -> tuple[str, ...]:
        return AXES[self.nesting]

    @cached_property
    def inputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.dir == "in")

    @cached_property
    def outputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.dir == "out")

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @cached_property
    def param_map(self) -> dict[str, Param]:
        """Params by name (read-only by convention: kept for the planner's many look-ups)."""
        return {p.name: p for p in self.params}

    @property
    def signature(self) -> str:
        ins = ", ".join(f"{p.type} {p.name}" for p in self.inputs)
        outs = ", ".join(f"{p.type} {p.name}" for p in self.outputs)
        return f"{outs} = {self.name}({ins})"


@dataclass(frozen=True)
class Library:
    name: str
    version: str
    root: Path
    subvector: int
    tile: tuple[int, int]
    functions: tuple[Function, ...]
    digest: str                                 # hash of every metadata and source file
    by_name: dict[str, tuple[Function, ...]] = field(default_factory=dict, compare=False)
    # path -> the bytes of each routine file as read (once) and hashed at load
    sources: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def source_text(self, path: Path | str) -> str:
        """The text of a routine file as it was read, checked and hashed when the library was
        loaded (never read again: a file changed since is not what was checked)."""
        data = self.sources.get(str(path))
        if data is None:
            from .registry import synthesized_source
            data = synthesized_source(path)
        if data is None:
            from ..errors import LibraryError
            raise LibraryError(path, "source", "was not read when the library was loaded")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            from ..errors import LibraryError
            raise LibraryError(path, "source", f"not UTF-8 text (byte {e.start})") from None

    def overloads(self, name: str) -> tuple[Function, ...]:
        return self.by_name.get(name, ())

    def element_shape(self, element: str, tile: tuple[int, int] | None = None,
                      index: tuple[str, ...] = ()) -> tuple[int, ...]:
        """Entries of an element.  ``tile`` is given for a 2-level function: its instance is that
        tile (the library's, or the variant's own blocking), and a vector's element is the piece
        along the tile side its axis runs: rows for ``i``, columns for ``j``."""
        if tile is not None and element == "subvector" and index in (("i",), ("j",)):
            return (tile[0] if index == ("i",) else tile[1],)
        if element == "scalar":
            return ()
        if element == "subvector":
            return (self.subvector,)
        if element == "tile":
            return tile or self.tile
        raise KeyError(element)
