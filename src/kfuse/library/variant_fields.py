"""Variant fields of library metadata checked apart from the loader's main flow: ``locals``
(private on-chip elements), and those that say where a variant's tiles reach and where its
routines come from: ``whole`` (axes a tile spans whole), ``cluster`` (blocks of a thread-block
cluster spanning that axis together), ``triangle`` (only the tiles on and above the diagonal) and
``source`` (its routine files).  Checked like the rest
of the metadata (``loader.py``): a problem is a LibraryError naming the file and the field."""
from __future__ import annotations

import re
import reprlib
from pathlib import Path

from .schema import AXES, TRIANGLES, Local, Param

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
