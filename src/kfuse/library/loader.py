"""Load and validate a library folder: ``library.toml`` plus function ``*.toml`` and ``*.cu`` files.

Every problem raises :class:`LibraryError` naming the file and the field.  See the README's
"Library format" section for the schema.
"""
from __future__ import annotations

import hashlib
import os
import re
import reprlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import LibraryError
from . import cusource
from .files import parse_toml, read_folder
from .fields import (PLAIN, check_sizes, cluster_field, flops_field, locals_field, macros_field, reach_field,
                     reference_field, size_field, sources_field, stencil_fields, triangle_field, triangle_tiles,
                     triangles_agree, whole_field)
from .mappings import MAPPINGS
from .schema import (ACCESS_MODES, AXES, KINDS, REDUCE_OPS, SCRIPT_TYPES, Arg, Function,
                     Library, Local, Param, Routine, Variant)

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
VARIANT_NAME_MAX = 64   # a stored plan names its variants (ir/plan.MAX_NAME: the tuning store's records)
SHIPPED = Path(__file__).resolve().parent.parent / "blas"
RESERVED = {"ix", "tx", "ty", "k", "real"}


def shown(value: Any) -> str:
    """A value for a message: its repr, cut short in length and depth (a TOML value may be a
    table nested thousands deep)."""
    return reprlib.repr(value)


class _Ctx:
    """Where we are in a file, for error messages; ``sources``: the folder's ``.cu`` files as
    read at load (name -> bytes; ``None``: a link leading out of the folder)."""

    def __init__(self, file: Path, sources: dict[str, bytes | None] | None = None):
        self.file = file
        self.sources = sources if sources is not None else {}

    def fail(self, field: str, message: str) -> LibraryError:
        return LibraryError(self.file, field, message)

    def get(self, table: dict, key: str, where: str, kind: type | tuple, default: Any = ...):
        if key not in table:
            if default is ...:
                raise self.fail(f"{where}.{key}", "missing")
            return default
        value = table[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(f"{where}.{key}", f"expected {want}, got {type(value).__name__} {shown(value)}")
        return value

    def ident(self, value: str, where: str) -> str:
        if not IDENT.match(value) or value in RESERVED:
            raise self.fail(where, f"{shown(value)} is not a usable identifier")
        return value

    def unknown_keys(self, table: dict, allowed: set[str], where: str) -> None:
        extra = sorted(set(table) - allowed)
        if extra:
            raise self.fail(f"{where}.{extra[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")


_LOADED: dict[tuple, Library] = {}      # (folders, their files' names and contents) -> library


def load_library(*folders: str | Path, shipped: bool = True) -> Library:
    """Load the shipped BLAS library (unless ``shipped=False``) plus any user library folders;
    folders whose files are unchanged since a load in this process give that load's library (the
    files are hashed: well under 1 ms, against 20-30 ms to parse and validate them again).

    Each folder's ``.toml`` and ``.cu`` files are read once, here: the checks, the digest and the
    CUDA modules built later all use those bytes (``Library.source_text``), so a file changed or
    replaced after the load is never compiled unchecked."""
    for bad in (f for f in folders if not isinstance(f, (str, os.PathLike))):     # a TypeError from pathlib else
        raise LibraryError(str(bad)[:60], "folders", f"a library folder is a str or a path, got {type(bad).__name__}")
    roots = ([SHIPPED] if shipped else []) + [Path(f) for f in folders]
    if not roots:
        raise LibraryError("<none>", "folders", "no library folder given")
    files = [read_folder(r) for r in roots]
    key = tuple((str(r.resolve()), tuple((name, hashlib.sha256(data or b"").digest(), data is None)
                                         for name, data in sorted(f.items())))
                for r, f in zip(roots, files))
    if key not in _LOADED:
        try:
            _LOADED[key] = _load(roots, files)
        except RecursionError:      # a TOML value nested thousands deep, in some message or check
            raise LibraryError(roots[-1], "toml", "a value is nested too deeply") from None
    return _LOADED[key]


_SHIPPED: list[Library] = []       # shipped_library's, once loaded


def shipped_library() -> Library:
    """The shipped library, loaded once per process: for callers that have no library of their own
    and are called often (a device loop whose body is a lambda, new at every call; ``kfuse.lib``
    on NumPy arrays), where ``load_library`` would read and hash every source file each time."""
    if not _SHIPPED:
        _SHIPPED.append(load_library())
    return _SHIPPED[0]


def _load(roots: list[Path], files: list[dict[str, bytes | None]]) -> Library:
    functions: list[Function] = []
    digest = hashlib.sha256()
    sources: dict[str, bytes] = {}
    name, version, subvector, tile = "", "", 32, (32, 32)
    for n, (root, found) in enumerate(zip(roots, files)):
        meta = root / "library.toml"
        meta_bytes = found.get("library.toml")
        lib = parse_toml(meta, meta_bytes) if meta_bytes is not None else {}
        ctx = _Ctx(meta)
        ctx.unknown_keys(lib, {"library", "elements"}, "")
        table = ctx.get(lib, "library", "", dict, {})
        ctx.unknown_keys(table, {"name", "version", "doc"}, "library")
        elements = ctx.get(lib, "elements", "", dict, {})
        ctx.unknown_keys(elements, {"subvector", "tile"}, "elements")
        sv = ctx.get(elements, "subvector", "elements", int, 32)
        tl = tuple(ctx.get(elements, "tile", "elements", list, [32, 32]))
        if sv < 1 or len(tl) != 2 or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 1
                                             for t in tl):
            raise ctx.fail("elements", "subvector must be a positive int and tile a list of two")
        if n == 0:
            subvector, tile = sv, tl
        elif (sv, tl) != (subvector, tile):
            raise ctx.fail("elements", f"element sizes {sv}, {tl} differ from the first library's "
                           f"{subvector}, {tile}")
        # by default the folder's own name: "." or "" (the working folder) has none but its real one
        this_name = ctx.get(table, "name", "library", str, root.name or root.resolve().name or "library")
        this_version = str(ctx.get(table, "version", "library", (str, int), "0"))
        for field, value in (("name", this_name), ("version", this_version)):
            if not PLAIN.fullmatch(value):
                raise ctx.fail(f"library.{field}", f"{shown(value)}: letters, digits and _ . + - only "
                               "(at most 100; it is written into the CUDA module)")
        name, version = name or this_name, version or this_version
        before = len(functions)
        for fname in sorted(f for f in found if f.endswith(".toml") and f != "library.toml"):
            data = found[fname]
            assert data is not None             # only .cu links are None
            digest.update(fname.encode() + data)
            functions.extend(load_file(root / fname, data, (sv,), tl, found))
        if len(functions) == before:
            # a folder given by mistake (a script's folder, the wrong level of a library) would
            # otherwise only change the library's digest, so that no calibration matches it
            raise LibraryError(root, "folder", "defines no functions (a library folder holds *.toml "
                               "files of [[function]] tables beside their .cu sources)")
        for fname in sorted(f for f in found if f.endswith(".cu")):
            data = found[fname]
            digest.update(fname.encode() + (data if data is not None else b"\0link out of the folder"))
            if data is not None:
                sources[str(root / fname)] = data
    by_name: dict[str, list[Function]] = {}
    for f in functions:
        for alias in (f.name, *f.aliases):
            same = [g for g in by_name.get(alias, []) if len(g.inputs) == len(f.inputs)]
            if same:
                raise LibraryError(f.file, "function.name",
                                   f"{alias} with {len(f.inputs)} inputs is already defined in {same[0].file}")
            by_name.setdefault(alias, []).append(f)
    return Library(name=name, version=version, root=roots[0], subvector=subvector, tile=tile,
                   functions=tuple(functions), digest=digest.hexdigest()[:16],
                   by_name={k: tuple(v) for k, v in by_name.items()}, sources=sources)


def load_file(path: Path, raw: bytes, subvector: tuple[int], tile: tuple[int, int],
               sources: dict[str, bytes | None]) -> list[Function]:
    ctx = _Ctx(path, sources)
    data = parse_toml(path, raw)
    ctx.unknown_keys(data, {"function"}, "")
    tables = ctx.get(data, "function", "", list)
    return triangle_tiles(ctx, [_load_function(ctx, t, f"function[{n}]") for n, t in enumerate(tables)], tile)


def _table(ctx: _Ctx, t, where: str) -> dict:
    if not isinstance(t, dict):
        raise ctx.fail(where, f"expected a table, got {type(t).__name__} {shown(t)}")
    return t


def _load_function(ctx: _Ctx, t: dict, where: str) -> Function:
    _table(ctx, t, where)
    ctx.unknown_keys(t, {"name", "aliases", "kind", "doc", "math", "reference", "flops", "params", "variant", "grid",
                         "boundary", "radius"}, where)
    name = ctx.ident(ctx.get(t, "name", where, str), f"{where}.name")
    where = f"function {name}"
    kind = ctx.get(t, "kind", where, str)
    if kind not in KINDS:
        raise ctx.fail(f"{where}.kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    axes = AXES[KINDS[kind]]
    aliases = ctx.get(t, "aliases", where, list, [])
    if not all(isinstance(a, str) for a in aliases):
        raise ctx.fail(f"{where}.aliases", "expected a list of names")
    aliases = tuple(ctx.ident(a, f"{where}.aliases") for a in aliases)
    params = tuple(_load_param(ctx, p, f"{where}.params[{n}]", axes)
                   for n, p in enumerate(ctx.get(t, "params", where, list)))
    names = [p.name for p in params]
    if len(set(names)) != len(names):
        raise ctx.fail(f"{where}.params", "duplicate parameter name")
    check_sizes(ctx, params, where)
    if not any(p.dir == "out" for p in params):
        raise ctx.fail(f"{where}.params", "no output parameter")
    reduces = [p for p in params if p.reduce]
    if kind in ("map", "map-map") and reduces:
        raise ctx.fail(f"{where}.kind", f"{kind} function has reduce output {reduces[0].name}")
    if kind in ("reduce", "map-reduce") and not reduces:
        raise ctx.fail(f"{where}.kind", f"{kind} function has no output with reduce = ...")
    grid, boundary, radius = stencil_fields(ctx, t, where, kind, params)
    variants = tuple(_load_variant(ctx, v, f"{where}.variant[{n}]", params, KINDS[kind])
                     for n, v in enumerate(ctx.get(t, "variant", where, list)))
    if not variants:
        raise ctx.fail(f"{where}.variant", "needs at least one variant")
    if len({v.name for v in variants}) != len(variants):
        raise ctx.fail(f"{where}.variant", "duplicate variant name")
    triangles_agree(ctx, variants, params, where)
    for v in variants:
        if v.fallback is not None and (v.fallback == v.name or v.fallback not in {w.name for w in variants}):
            raise ctx.fail(f"{where}.variant.{v.name}.fallback", f"{v.fallback!r} is not another variant of "
                           f"{name} ({', '.join(w.name for w in variants if w is not v)})")
    return Function(name=name, aliases=aliases, kind=kind, doc=ctx.get(t, "doc", where, str, ""),
                    math=ctx.get(t, "math", where, str, ""), params=params, variants=variants,
                    file=ctx.file, reference=reference_field(ctx, t, where, params),
                    flops=flops_field(ctx, t, where, params), grid=grid, boundary=boundary, radius=radius)


def _load_param(ctx: _Ctx, p: dict, where: str, axes: tuple[str, ...]) -> Param:
    if not isinstance(p, dict):
        raise ctx.fail(where, "expected a table")
    ctx.unknown_keys(p, {"name", "type", "dir", "index", "invariant", "reduce", "pad", "partial", "reach", "size"},
                     where)
    name = ctx.ident(ctx.get(p, "name", where, str), f"{where}.name")
    where = f"{where.rsplit('.', 1)[0]}.params.{name}"
    ptype = ctx.get(p, "type", where, str)
    if ptype not in SCRIPT_TYPES:
        raise ctx.fail(f"{where}.type", f"{ptype!r} is not one of {', '.join(SCRIPT_TYPES)}")
    direction = ctx.get(p, "dir", where, str)
    if direction not in ("in", "out"):
        raise ctx.fail(f"{where}.dir", f"{direction!r} is not 'in' or 'out'")
    index = tuple(ctx.get(p, "index", where, list, []))
    size = size_field(ctx, p, where, ptype, direction, index)
    dims = 0 if size else {"scalar": 0, "vector": 1, "matrix": 2, "csr": 1}[ptype]   # a csr's rows follow i
    if len(index) != dims:
        raise ctx.fail(f"{where}.index", f"a {ptype} follows {dims} instance axes, got {list(index)}")
    bad = [a for a in index if a not in axes]
    if bad or len(set(index)) != len(index):
        raise ctx.fail(f"{where}.index", f"axes must be distinct and among {list(axes)}, got {list(index)}")
    if ptype == "matrix" and index != ("i", "j"):
        raise ctx.fail(f"{where}.index", "a matrix follows the instance axes in order: [\"i\", \"j\"]")
    reduce = ctx.get(p, "reduce", where, str, None)
    if reduce is not None:
        if direction != "out":
            raise ctx.fail(f"{where}.reduce", "only outputs are reduced")
        if reduce not in REDUCE_OPS:
            raise ctx.fail(f"{where}.reduce", f"{reduce!r} is not one of {', '.join(REDUCE_OPS)}")
        if set(index) == set(axes):
            raise ctx.fail(f"{where}.reduce", "a reduced output must leave out at least one instance axis")
    elif direction == "out" and set(index) != set(axes):
        raise ctx.fail(f"{where}.index", "a map output must follow every instance axis "
                       f"{list(axes)} (or declare reduce = \"sum\")")
    hoist = ctx.get(p, "invariant", where, bool, True)
    if direction == "out" and "invariant" in p:
        raise ctx.fail(f"{where}.invariant", "an output's invariance follows from its index and the loop axis")
    pad = ctx.get(p, "pad", where, int, 1 if ptype == "matrix" else 0)   # 1: conflict-free columns
    if pad < 0 or (pad and ptype != "matrix"):
        raise ctx.fail(f"{where}.pad", "padding is a non-negative number of entries per tile row")
    partial = ctx.get(p, "partial", where, bool, False)
    if partial and (direction != "in" or ptype == "matrix"):
        raise ctx.fail(f"{where}.partial", "only vector or scalar inputs can take partial sums")
    reach = reach_field(ctx, p, where, ptype, size, direction != "in" or ptype == "scalar" or partial)
    return Param(name, ptype, direction, index, hoist, reduce, pad, partial, reach, size)


RESIDENT_THREADS = (64, 128, 256, 512, 1024, 2048)    # a variant's resident_threads: 2048 is an sm_90 multiprocessor's most


def _load_variant(ctx: _Ctx, v: dict, where: str, params: tuple[Param, ...], nesting: int) -> Variant:
    _table(ctx, v, where)
    ctx.unknown_keys(v, {"name", "source", "threads", "macros", "instances_per_block", "locals",
                         "routines", "tile", "whole", "cluster", "fallback", "triangle",
                         "resident_threads"}, where)
    name = ctx.ident(ctx.get(v, "name", where, str), f"{where}.name")
    if len(name) > VARIANT_NAME_MAX:
        raise ctx.fail(f"{where}.name", f"{len(name)} characters; a variant's name has at most {VARIANT_NAME_MAX} "
                                        "(a tuned plan names it in the tuning store)")
    where = f"{where.rsplit('.', 1)[0]}.variant.{name}"
    sources = sources_field(ctx, v, where)
    source = sources[0]
    macros = macros_field(ctx, ctx.get(v, "macros", where, dict, {}), where)
    threads = _threads(ctx, ctx.get(v, "threads", where, list), f"{where}.threads", macros)
    on_rows = nesting == 1 and "whole" in v         # runs on the rows of a nested kernel's strips
    if nesting == 1 and threads[1] != 1 and not on_rows:
        raise ctx.fail(f"{where}.threads", "an unnested function's instance is one row of threads: [X, 1] "
                       '(but a variant on the rows of strips, whole = ["j"])')
    tile = None
    if "tile" in v:
        if nesting != 2 and not on_rows:
            raise ctx.fail(f"{where}.tile", "only a 2-level function's instances (and a 1-level variant on "
                           "the rows of strips, whole = [\"j\"]) are tiles")
        tile = _threads(ctx, v["tile"], f"{where}.tile", macros, "[rows, columns]")
    whole = whole_field(ctx, v, where, params, nesting, tile)
    cluster = cluster_field(ctx, v, where, macros, whole)
    if on_rows and cluster:
        raise ctx.fail(f"{where}.cluster", "a variant on the rows of strips runs once per strip: the blocks "
                       "of a cluster share one strip")
    nested = nesting == 2 or on_rows
    ipb = tuple(ctx.get(v, "instances_per_block", where, list, [1] if nested else [1, 2, 4, 8, 16]))
    if not ipb or not all(isinstance(x, int) and x >= 1 for x in ipb):
        raise ctx.fail(f"{where}.instances_per_block", "expected a non-empty list of positive ints")
    if nested and ipb != (1,):
        raise ctx.fail(f"{where}.instances_per_block", "a nested function runs one instance per block")
    locals_ = locals_field(ctx, v, where, params, macros)
    routines = tuple(_load_routine(ctx, r, f"{where}.routines[{n}]", params, locals_, macros, threads)
                     for n, r in enumerate(ctx.get(v, "routines", where, list)))
    for loc in locals_:
        if loc.buffers > 1 and any(a.name == loc.name and a.mode == "acc" for r in routines for a in r.elements):
            raise ctx.fail(f"{where}.locals", f"local {loc.name} has {loc.buffers} copies: it is written "
                           "(mode w) and read, never accumulated (a clear would reach the other copy)")
    triangle = triangle_field(ctx, v, where, nesting, tile, whole)
    resident = ctx.get(v, "resident_threads", where, int, 0)
    if resident and resident not in RESIDENT_THREADS:         # (ctx.get refuses a bool)
        raise ctx.fail(f"{where}.resident_threads", f"expected a power of two from {RESIDENT_THREADS[0]} to "
                       f"{RESIDENT_THREADS[-1]} (threads a multiprocessor holds at once), got {resident!r}")
    variant = Variant(name, source, threads, macros, ipb, tuple(locals_), routines, tile, whole=whole,
                      cluster=cluster, sources=sources if len(sources) > 1 else (),
                      fallback=ctx.get(v, "fallback", where, str, None), triangle=triangle,
                      resident_threads=resident)
    _check_routines(ctx, variant, params, where)
    return replace(variant, warp_wide=cusource.check_definitions(ctx, variant, where))


def _threads(ctx: _Ctx, value: list, where: str, macros: dict, what: str = "[X, Y]") -> tuple[str | int, str | int]:
    """A pair of sizes (threads X by Y, or a tile's rows by columns), each an int or a macro."""
    if not isinstance(value, list) or len(value) != 2 or not all(
            (isinstance(t, int) and not isinstance(t, bool) and t > 0) or (isinstance(t, str) and t in macros)
            for t in value):
        raise ctx.fail(where, f"expected {what}, each a positive int or a macro name")
    return value[0], value[1]


def _load_routine(ctx, r: dict, where: str, params: tuple[Param, ...], locals_: list[Local],
                  macros: dict, threads) -> Routine:
    _table(ctx, r, where)
    ctx.unknown_keys(r, {"name", "fn", "args", "threads", "overlap"}, where)
    name = ctx.get(r, "name", where, str)
    where = f"{where.rsplit('.', 1)[0]}.routine.{name}"
    m = re.fullmatch(r"(load|store|finish)_([A-Za-z_][A-Za-z0-9_]*)|(compute)(_[A-Za-z0-9_]+)?", name)
    if not m:
        raise ctx.fail(f"{where}.name", "routines are named load_<param>, compute[_<suffix>], "
                       "finish_<param> or store_<param>")
    kind = m.group(1) or "compute"
    pmap = {p.name: p for p in params}
    target = m.group(2)
    if target is not None:
        p = pmap.get(target)
        if p is None or not p.on_chip:
            raise ctx.fail(f"{where}.name", f"{target} is not an on-chip parameter")
        if (kind == "load") != (p.dir == "in"):
            raise ctx.fail(f"{where}.name", f"{kind} of {p.dir}put parameter {target}")
    fn = ctx.ident(ctx.get(r, "fn", where, str), f"{where}.fn")
    lmap = {loc.name: loc for loc in locals_}
    args = []
    for text in ctx.get(r, "args", where, list):
        args.append(_parse_arg(ctx, text, f"{where}.args", pmap, lmap))
    rthreads = _threads(ctx, r["threads"], f"{where}.threads", macros) if "threads" in r else threads
    overlap = ctx.get(r, "overlap", where, bool, False)
    if overlap and kind != "load":
        raise ctx.fail(f"{where}.overlap", "only a load overlaps the variant's other loads")
    return Routine(name, kind, fn, tuple(args), target, rthreads, overlap)


def _parse_arg(ctx, text, where, pmap: dict[str, Param], lmap: dict[str, Local]) -> Arg:
    if not isinstance(text, str):
        raise ctx.fail(where, f"expected strings, got {shown(text)}")
    if text.startswith("&"):
        p = pmap.get(text[1:])
        if p is None or not (p.on_chip or p.gathered):
            raise ctx.fail(where, f"{text}: global view of an unknown or scalar-input parameter")
        return Arg("global", p.name)
    parts = text.split(":")
    if len(parts) == 1:
        p = pmap.get(text)
        if p is None or p.on_chip:
            raise ctx.fail(where, f"{text}: a bare name must be a scalar input parameter "
                           "(elements are written NAME:MODE:MAPPING, global views &NAME)")
        return Arg("scalar", text)
    if len(parts) != 3:
        raise ctx.fail(where, f"{text}: expected NAME:MODE:MAPPING")
    ename, mode, mapping = parts
    if ename in pmap and pmap[ename].on_chip:
        element = pmap[ename].element
    elif ename in lmap:
        element = lmap[ename].element
    else:
        raise ctx.fail(where, f"{text}: {ename} is neither an on-chip parameter nor a local")
    if mode not in ACCESS_MODES:
        raise ctx.fail(where, f"{text}: mode {mode!r} is not one of {', '.join(ACCESS_MODES)}")
    mdef = MAPPINGS.get(mapping)
    if mdef is None:
        raise ctx.fail(where, f"{text}: mapping {mapping!r} is not one of {', '.join(MAPPINGS)}")
    if mdef.kind not in ("*", element):
        raise ctx.fail(where, f"{text}: mapping {mapping} is for a {mdef.kind}, {ename} is a {element}")
    return Arg("element", ename, mode, mapping)


def _check_routines(ctx: _Ctx, v: Variant, params: tuple[Param, ...], where: str) -> None:
    names = [r.name for r in v.routines]
    if len(set(names)) != len(names):
        raise ctx.fail(f"{where}.routines", "duplicate routine name")
    if not v.computes:
        raise ctx.fail(f"{where}.routines", "needs at least one compute routine")
    for p in params:
        if not p.on_chip:
            continue
        want = f"{'load' if p.dir == 'in' else 'store'}_{p.name}"
        if want not in names:
            raise ctx.fail(f"{where}.routines", f"missing routine {want}")
    written: set[str] = set()
    for r in v.routines:
        rw = f"{where}.routine.{r.name}.args"
        if r.kind in ("load", "store"):
            globals_ = [a.name for a in r.args if a.kind == "global"]
            if globals_ != [r.param]:
                raise ctx.fail(rw, f"a {r.kind} routine takes exactly the global view &{r.param}")
            elems = r.elements
            # after finish routines, a store reads what they staged (locals) instead of its output
            staged = {a.name for f in v.finishes(r.param) for a in f.elements if a.mode != "r"} \
                if r.kind == "store" and r.param is not None else set()
            if staged:
                if not elems or any(a.name not in staged | {r.param} or a.mode != "r" for a in elems):
                    raise ctx.fail(rw, f"a store after finish routines reads {r.param} or the locals they "
                                   f"wrote ({', '.join(sorted(staged))})")
            elif r.kind == "load" and elems and elems[0].name == r.param and all(
                    a.name in {loc.name for loc in v.locals} and a.mode == "w" for a in elems[1:]):
                pass    # a load may also write locals: more of the same array (symv's x along i too)
            elif len(elems) != 1 or elems[0].name != r.param:
                raise ctx.fail(rw, f"a {r.kind} routine accesses exactly the element {r.param}"
                               + (" (a load: first, then locals it writes)" if r.kind == "load" else ""))
            if (elems[0].mode == "r") != (r.kind == "store"):
                raise ctx.fail(rw, f"a {r.kind} routine must {'read' if r.kind == 'store' else 'write'} "
                               f"{r.param}")
            if r.kind == "load" and elems[0].mode == "acc":
                raise ctx.fail(rw, "a load writes its element (mode w)")
            if r.kind == "load":
                written |= {a.name for a in elems[1:]}
        else:
            pmap = {p.name: p for p in params}
            if any(a.kind == "global" and not pmap[a.name].gathered for a in r.args) or (
                    r.kind == "finish" and any(a.kind == "global" for a in r.args)):
                raise ctx.fail(rw, f"a {r.kind} routine works on chip only (no &global views), but for "
                               "compute routines' views of inputs declared reach = \"neighbours\" or \"any\"")
            if r.kind == "finish":
                if names.index(r.name) > names.index(f"store_{r.param}"):
                    raise ctx.fail(rw, f"a finish routine comes before store_{r.param}")
                if not any(a.name == r.param and a.mode == "r" for a in r.elements) or any(
                        a.mode != "r" and a.name not in {loc.name for loc in v.locals} for a in r.elements):
                    raise ctx.fail(rw, f"a finish routine reads {r.param} and writes only locals")
            for a in r.elements:
                q = pmap.get(a.name)
                if q is not None and q.dir == "in" and a.mode != "r":
                    raise ctx.fail(rw, f"compute writes input {a.name}")
                if q is not None and q.dir == "out" and a.mode == "w" and q.reduce:
                    raise ctx.fail(rw, f"reduced output {a.name} is accumulated (mode acc), not written")
                if q is not None and q.dir == "out" and a.mode == "acc" and not q.reduce:
                    raise ctx.fail(rw, f"map output {a.name} is written (mode w), not accumulated")
            for a in r.elements:
                if a.mode == "r" and a.name in {loc.name for loc in v.locals} and a.name not in written:
                    raise ctx.fail(rw, f"reads local {a.name} before any routine writes it")
            written |= {a.name for a in r.elements if a.mode != "r"}
    for p in params:
        if p.gathered and not any(a.kind == "global" and a.name == p.name for r in v.computes for a in r.args):
            raise ctx.fail(f"{where}.routines", f"no compute routine reads {p.name} (reach = {p.reach!r}: "
                           f"through its global view &{p.name})")
        if p.dir == "out" and p.on_chip and p.name not in written:
            raise ctx.fail(f"{where}.routines", f"no compute routine writes output {p.name}")
