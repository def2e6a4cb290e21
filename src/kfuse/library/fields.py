"""The fields of library metadata checked apart from the loader's main flow (``loader.py``),
each a LibraryError naming the file and the field:

- parameters read beyond their element: ``reach`` (a csr matrix is always read through its
  global view) and ``size`` (an input that follows no instance axis takes its sizes from other
  parameters: a sparse mat-vec's x is as long as A has columns);
- variants: ``macros`` (capped), ``locals`` (private on-chip elements), and where a variant's
  tiles reach and where its routines come from: ``whole`` (axes a tile spans whole), ``cluster``
  (blocks of a thread-block cluster spanning that axis together), ``triangle`` (only the tiles on
  and above the diagonal) and ``source`` (its routine files);
- a stencil's ``grid``, ``boundary`` and ``radius`` (docs/library-format.md, "Stencils");
- the expressions ``reference`` and ``flops``, checked by :mod:`.expr` (never run as Python)."""
from __future__ import annotations

import re
import reprlib
from pathlib import Path

from .expr import ExprError, check
from .schema import AXES, BOUNDARIES, GRID_RANKS, MAX_RADIUS, REACHES, TRIANGLES, Local, Param


# -- param fields --------------------------------------------------------------------
SIZE_REF = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.(len|rows|cols)")
WORDS = {"vector": ("len",), "matrix": ("rows", "cols"), "csr": ("rows", "cols")}


def size_field(ctx, p: dict, where: str, ptype: str, direction: str, index: tuple) -> tuple[str, ...]:
    """The ``size`` field (empty when absent), and the csr type's index rule."""
    size = tuple(ctx.get(p, "size", where, list, []))
    if size and (not all(isinstance(s, str) and SIZE_REF.fullmatch(s) for s in size)
                 or len(size) != {"vector": 1, "matrix": 2}.get(ptype, -1) or index):
        raise ctx.fail(f"{where}.size", "a vector (one) or matrix (two) input with index = [] gives its sizes "
                       "as dimensions of other parameters: \"A.cols\", \"x.len\", \"B.rows\"")
    if ptype == "csr" and (direction != "in" or index != ("i",)):
        raise ctx.fail(f"{where}.index", "a csr matrix is an input whose rows follow axis i: index = [\"i\"]")
    return size


def reach_field(ctx, p: dict, where: str, ptype: str, size: tuple[str, ...], element_only: bool) -> str:
    """The ``reach`` field: one of REACHES, "element" for outputs, scalars and partial sums
    (``element_only``), "any" for a csr matrix (its default), not "element" for an input with
    ``size`` (it follows no instance axis, so it has no element)."""
    reach = ctx.get(p, "reach", where, str, "any" if ptype == "csr" else "element")
    if reach not in REACHES:
        raise ctx.fail(f"{where}.reach", f"{reach!r} is not one of {', '.join(REACHES)}")
    if reach != "element" and element_only:
        raise ctx.fail(f"{where}.reach", "only vector or matrix inputs (not partial sums) are read beyond "
                       "their element")
    if ptype == "csr" and reach != "any":
        raise ctx.fail(f"{where}.reach", "a csr matrix is read through its global view only: reach = \"any\"")
    if size and reach == "element":
        raise ctx.fail(f"{where}.size", "only inputs read beyond their element (reach = \"neighbours\" or "
                       "\"any\") follow no instance axis")
    return reach


def check_sizes(ctx, params, where: str) -> None:
    """Every ``size`` names a dimension of another parameter that follows the instance axes."""
    for p in params:
        for ref in p.size:
            other, word = ref.split(".")
            q = next((q for q in params if q.name == other and q is not p), None)
            if q is None or word not in WORDS.get(q.type, ()) or q.size:
                raise ctx.fail(f"{where}.params.{p.name}.size", f"{ref}: not a dimension of another parameter "
                               "that follows the instance axes")


# -- variant fields ------------------------------------------------------------------
#: a variant's macros are searched as the product of their values (one routine set per
#: combination): the caps keep a library from asking for millions of them (the shipped library
#: has at most 5 values a macro, 4 macros and 60 combinations a variant)
MAX_MACROS = 16
MAX_MACRO_VALUES = 16
MAX_COMBINATIONS = 256


def macros_field(ctx, table: dict, where: str) -> dict[str, tuple[int, ...]]:
    """``macros = { BY = [8, 16], R = [1, 2] }``: each macro's values, a non-empty list of
    positive ints; at most ``MAX_MACROS`` macros of ``MAX_MACRO_VALUES`` values and
    ``MAX_COMBINATIONS`` combinations of them (two macros of 1,000 values took a plan search 67 s
    and 5 GB)."""
    if len(table) > MAX_MACROS:
        raise ctx.fail(f"{where}.macros", f"{len(table)} macros: at most {MAX_MACROS} a variant")
    macros: dict[str, tuple[int, ...]] = {}
    combinations = 1
    for m, values in table.items():
        ctx.ident(m, f"{where}.macros")
        if not isinstance(values, list) or not values or not all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in values):
            raise ctx.fail(f"{where}.macros.{m}", "expected a non-empty list of positive ints")
        if len(values) > MAX_MACRO_VALUES:
            raise ctx.fail(f"{where}.macros.{m}", f"{len(values)} values: at most {MAX_MACRO_VALUES} a macro")
        macros[m] = tuple(values)
        combinations *= len(values)
    if combinations > MAX_COMBINATIONS:
        raise ctx.fail(f"{where}.macros", f"{combinations} combinations of the macros' values: at most "
                       f"{MAX_COMBINATIONS} a variant")
    return macros


def whole_field(ctx, v: dict, where: str, params: tuple[Param, ...], nesting: int,
           tile: tuple[str | int, str | int] | None) -> tuple[str, ...]:
    """``whole = ["j"]``: the axes a variant's tile spans whole (one instance per row strip, say).
    Only a variant with a tile of its own whose side along the axis is a macro (its widest value is
    the longest axis the variant covers) may declare one; the axis must be one that a reduced
    output of the function leaves out or that its outputs follow (a consumer of the same strips).
    A 1-level function's variant may declare ``whole = ["j"]``: it runs on the rows of the strips
    of a nested kernel (its instance: a strip's rows, once per strip), never alone."""
    if "whole" not in v:
        return ()
    axes = v["whole"]
    if not isinstance(axes, list) or not axes or not all(isinstance(a, str) for a in axes) \
            or len(set(axes)) != len(axes):
        raise ctx.fail(f"{where}.whole", f"expected a non-empty list of distinct instance axes, got {axes!r}")
    if tile is None:
        raise ctx.fail(f"{where}.whole", "a variant spanning an axis whole declares its tile = [rows, columns]")
    if nesting == 1:
        # a vector call on the rows of a nested kernel's strips: its instance axis is the strips'
        # rows (i), once per strip, beside calls whose tiles span the columns (j) whole
        if list(axes) != ["j"] or not isinstance(tile[1], str):
            raise ctx.fail(f"{where}.whole", 'a 1-level variant on the rows of strips declares whole = ["j"] '
                           "and a tile whose columns are a macro (the strips' width)")
        return ("j",)
    if nesting != 2:
        raise ctx.fail(f"{where}.whole", "only a 2-level function's tiles can span an axis whole")
    for a in axes:
        if a not in AXES[nesting]:
            raise ctx.fail(f"{where}.whole", f"{a!r} is not an instance axis ({', '.join(AXES[nesting])})")
        side = tile[0] if a == "i" else tile[1]
        if not isinstance(side, str):
            raise ctx.fail(f"{where}.whole", f"the tile side along {a} is a fixed {side} entries: it spans the "
                           "axis whole only through a macro (its values are the lengths covered)")
    if len(axes) == len(AXES[nesting]):
        raise ctx.fail(f"{where}.whole", "a tile spanning every axis whole leaves no instances to run in parallel")
    return tuple(axes)


CLUSTER_SIZES = (2, 4, 8)       # blocks per cluster a kernel may declare on every sm_90 GPU (portable)


def cluster_field(ctx, v: dict, where: str, macros: dict[str, tuple[int, ...]],
             whole: tuple[str, ...]) -> str | None:
    """``cluster = "C"``: the macro whose values are the blocks of a thread-block cluster that
    together span the variant's one ``whole`` axis (each block a tile of it; the blocks exchange
    values through distributed shared memory, sm_90).  Its values are portable cluster sizes."""
    if "cluster" not in v:
        return None
    m = v["cluster"]
    if not isinstance(m, str) or m not in macros:
        raise ctx.fail(f"{where}.cluster", f"expected the name of one of the variant's macros, got {m!r}")
    if len(whole) != 1:
        raise ctx.fail(f"{where}.cluster", "a cluster spans one axis whole: declare whole = [that axis]")
    bad = [x for x in macros[m] if x not in CLUSTER_SIZES]
    if bad:
        raise ctx.fail(f"{where}.macros.{m}", f"blocks per cluster must be among {list(CLUSTER_SIZES)} "
                       f"(portable cluster sizes), got {bad}")
    return m


def sources_field(ctx, v: dict, where: str) -> tuple[Path, ...]:
    """``source``: a routine file, or a list of them (a variant reusing another's routines)."""
    names = ctx.get(v, "source", where, (str, list))
    if isinstance(names, str):
        names = [names]
    if not names or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise ctx.fail(f"{where}.source", f"expected a file name or a list of distinct file names, got {names!r}")
    return tuple(source_file(ctx, n, f"{where}.source") for n in names)


# a library's name and version, and its files' names, are written into comments and #line
# directives of the CUDA module: one line of plain characters, no quote or backslash
PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}")


def source_file(ctx, name: str, where: str) -> Path:
    """A variant's routine file: a ``.cu`` file directly in the library folder (the digest covers
    exactly those); no absolute paths, no ``..``, no symbolic link leading out of the folder.
    Looked up among the files the loader read (``ctx.sources``), never on the file system again."""
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or len(rel.parts) > 1:
        raise ctx.fail(where, f"{name[:100]!r}: a source is a file name in the library folder "
                       "(no directories, no absolute path)")
    source = ctx.file.parent / rel
    if name not in ctx.sources:
        if rel.suffix != ".cu" or not PLAIN.fullmatch(name):
            raise ctx.fail(where, f"{name[:100]!r}: a source is a .cu file in the library folder, its "
                           "name letters, digits and _ . + - (at most 100)")
        raise ctx.fail(where, f"{name} not found beside the metadata")
    if ctx.sources[name] is None:
        raise ctx.fail(where, f"{name!r}: a source is a .cu file in the library folder "
                       f"(this one is a link to {folder_safe(source)})")
    return source


def folder_safe(path: Path) -> str:
    """Where a link leads, for a message (or why that cannot be said)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):
        return "a path that cannot be resolved"


def triangle_field(ctx, v: dict, where: str, nesting: int, tile, whole: tuple[str, ...]) -> str | None:
    """A variant's ``triangle``: the instances are the tiles on and above the diagonal of a square
    matrix only.  Its tiles are square (the diagonal runs through the diagonal tiles' corners), a
    2-level function's, not spanning an axis whole (a strip would cross the diagonal)."""
    triangle = ctx.get(v, "triangle", where, str, None)
    if triangle is None:
        return None
    if triangle not in TRIANGLES:
        raise ctx.fail(f"{where}.triangle", f"{triangle!r} is not one of {', '.join(map(repr, TRIANGLES))}")
    if nesting != 2:
        raise ctx.fail(f"{where}.triangle", "only a 2-level function's tiles lie on or off a diagonal")
    if whole or "cluster" in v or "fallback" in v:
        raise ctx.fail(f"{where}.triangle", "a variant on a triangle walks single tiles: no whole, cluster "
                       "or fallback")
    if tile is not None and tile[0] != tile[1]:
        raise ctx.fail(f"{where}.triangle", f"a triangle's tiles are square (one int or one macro for both "
                       f"sides): tile = {list(tile)}")
    return triangle


def triangles_agree(ctx, variants, params: tuple[Param, ...], where: str) -> None:
    """Every variant of a function walks the same tiles (fusion rules ask the function), and a
    function on a triangle reads a matrix."""
    if len({v.triangle for v in variants}) > 1:
        raise ctx.fail(f"{where}.variant", "every variant walks the same tiles: give each the same triangle "
                       f"(here {', '.join(sorted(repr(v.triangle) for v in variants))})")
    if variants[0].triangle and not any(p.type == "matrix" for p in params):
        raise ctx.fail(f"{where}.variant.{variants[0].name}.triangle", "a function on a triangle reads a matrix")


def triangle_tiles(ctx, functions: list, tile: tuple[int, int]) -> list:
    """``functions``, once every variant on a triangle without a tile of its own is known to take
    a square library tile."""
    for f in functions:
        for v in f.variants:
            if v.triangle and v.tile is None and tile[0] != tile[1]:
                raise ctx.fail(f"function {f.name}.variant.{v.name}.triangle", "a triangle's tiles are square: "
                               f"declare tile = [S, S] (the library's tile is {tile[0]} x {tile[1]})")
    return functions


def locals_field(ctx, v: dict, where: str, params: tuple[Param, ...], macros: dict) -> list[Local]:
    """A variant's ``locals``: private on-chip elements, each a scalar, subvector or tile."""
    locals_: list[Local] = []
    for n, loc in enumerate(ctx.get(v, "locals", where, list, [])):
        lw = f"{where}.locals[{n}]"
        if not isinstance(loc, dict):
            raise ctx.fail(lw, f"expected a table, got {type(loc).__name__} {reprlib.repr(loc)}")
        ctx.unknown_keys(loc, {"name", "element", "shape", "pad", "buffers"}, lw)
        lname = ctx.ident(ctx.get(loc, "name", lw, str), f"{lw}.name")
        element = ctx.get(loc, "element", lw, str)
        shape = tuple(ctx.get(loc, "shape", lw, list))
        dims = {"scalar": 0, "subvector": 1, "tile": 2}.get(element)
        if dims is None:
            raise ctx.fail(f"{lw}.element", f"{element!r} is not scalar, subvector or tile")
        if len(shape) != dims or not all((isinstance(s, int) and s > 0) or s in macros for s in shape):
            raise ctx.fail(f"{lw}.shape", f"a {element} has {dims} sizes, each an int or a macro")
        if lname in {p.name for p in params}:
            raise ctx.fail(f"{lw}.name", f"{lname} is also a parameter")
        if lname in {x.name for x in locals_}:
            raise ctx.fail(f"{lw}.name", f"duplicate local {lname}")
        lpad = ctx.get(loc, "pad", lw, int, 0)
        if lpad < 0 or (lpad and element != "tile"):
            raise ctx.fail(f"{lw}.pad", "padding is a non-negative number of entries per tile row")
        buffers = ctx.get(loc, "buffers", lw, int, 1)
        if buffers not in (1, 2):
            raise ctx.fail(f"{lw}.buffers", "a local has 1 copy or 2 (alternate instances along the loop axis)")
        locals_.append(Local(lname, element, shape, lpad, buffers))
    return locals_


# -- stencil fields ------------------------------------------------------------------
def stencil_fields(ctx, t: dict, where: str, kind: str, params: tuple[Param, ...]) -> tuple[int, str, int]:
    """(grid, boundary, radius) of a stencil: a map whose inputs declared reach = "neighbours"
    are read as a 2-D or 3-D grid (their routines get a ``KfGrid2``/``KfGrid3`` view with the
    boundary rule compiled in).  A function without ``grid`` takes neither of the others."""
    if "grid" not in t:
        for key in ("boundary", "radius"):
            if key in t:
                raise ctx.fail(f"{where}.{key}", "only a stencil (a function declaring grid = 2 or 3) has one")
        return 0, "zero", 0
    grid = ctx.get(t, "grid", where, int)
    if grid not in GRID_RANKS:
        raise ctx.fail(f"{where}.grid", f"{grid} is not one of {', '.join(map(str, GRID_RANKS))} (the grid's rank)")
    if kind != "map":
        raise ctx.fail(f"{where}.grid", f"a stencil is a map over the grid's points, not a {kind}")
    if not any(p.reach == "neighbours" for p in params):
        raise ctx.fail(f"{where}.grid", "a stencil reads at least one input around its point: declare it "
                       "reach = \"neighbours\"")
    bad = [p.name for p in params if p.reach == "any"]
    if bad:
        raise ctx.fail(f"{where}.grid", f"{bad[0]} declares reach = \"any\"; a stencil's inputs are read "
                       "around their point (\"neighbours\") or at it (\"element\")")
    boundary = ctx.get(t, "boundary", where, str, "zero")
    if boundary not in BOUNDARIES:
        raise ctx.fail(f"{where}.boundary", f"{boundary!r} is not one of {', '.join(BOUNDARIES)}")
    radius = ctx.get(t, "radius", where, int, 1)
    if not 1 <= radius <= MAX_RADIUS:
        raise ctx.fail(f"{where}.radius", f"{radius}: a stencil reads 1 to {MAX_RADIUS} points away along each axis")
    return grid, boundary, radius


# -- expr fields ---------------------------------------------------------------------
def _expression(ctx, t: dict, where: str, key: str, names: set[str], syntax: str, what: str,
                grid: bool = False) -> str | None:
    """An optional expression field, checked by :mod:`.expr` (never run as Python): only the constructs
    the library format documents (``grid``: a stencil's reference, with cross and box), names among ``names``."""
    expr = ctx.get(t, key, where, str, None)
    if expr is not None:
        try:
            check(expr, frozenset(names), "grid_reference" if grid and key == "reference" else key)
        except ExprError as e:
            msg = str(e)
            if msg.startswith("syntax: "):
                msg = f"{syntax}: {msg[8:]}"
            raise ctx.fail(f"{where}.{key}", f"{msg} (in {expr[:80]!r})") from None
    return expr


def reference_field(ctx, t: dict, where: str, params: tuple[Param, ...]) -> str | None:
    """A NumPy expression of the inputs giving the output (a tuple for several outputs)."""
    names = {p.name for p in params if p.dir == "in"}
    return _expression(ctx, t, where, "reference", names, "not a Python expression", "an input parameter",
                       grid=t.get("grid", 0) in GRID_RANKS)


def flops_field(ctx, t: dict, where: str, params: tuple[Param, ...]) -> str | None:
    """Floating-point operations as an expression of the parameters' entry counts."""
    return _expression(ctx, t, where, "flops", {p.name for p in params}, "not an expression", "a parameter")
