"""Thread-to-data mappings: which entries of an on-chip element each thread touches.

A routine declares, for every on-chip element it accesses, a mapping.  Under a mapping other
than ``any`` a routine addresses the element only by *slot* ``e(k)``, ``k < slots``: the
mapping fixes which entry slot ``k`` of thread ``(tx, ty)`` is.  When every access of an
element in a kernel uses the same mapping with the same thread shape, each thread only ever
touches its own entries, so the element can live in registers (``e(k)`` becomes ``e.v[k]``)
and no barrier is needed between its writer and its readers.  ``any`` means arbitrary
indexing (``e.at(...)``): such an element lives in shared memory, and barriers guard it.

Element shapes: scalar ``()``, subvector ``(K,)``, tile ``(R, C)``.  Threads of a routine
instance are arranged ``X`` by ``Y`` (``tx < X``, ``ty < Y``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MappingDef:
    name: str
    kind: str            # element kind it applies to: scalar | subvector | tile | * (any kind)
    doc: str
    registers: bool      # may the element live in registers under this mapping
    shared: bool         # may the element live in shared memory under this mapping
    width: int = 1       # consecutive entries a thread moves per access (4: 16-byte accesses)

    def check(self, shape: tuple[int, ...], X: int, Y: int) -> str | None:
        """Reason this mapping cannot be used for this element shape and thread shape."""
        if self.name in ("lane", "colpart"):
            (K,) = shape
            return None if K % X == 0 else f"subvector of {K} entries is not a multiple of {X} threads in x"
        if self.name in ("split", "rowpart"):
            (K,) = shape
            return None if K % Y == 0 else f"subvector of {K} entries is not a multiple of {Y} threads in y"
        if self.name in ("quad", "qcolpart"):
            (K,) = shape
            return None if K % (4 * X) == 0 else (f"subvector of {K} entries is not a multiple of 4 x {X} "
                                                   "threads in x")
        if self.name == "qrows":
            R, C = shape
            if C % (4 * X):
                return f"tile of {C} columns is not a multiple of 4 x {X} threads in x (4 columns each)"
            return None if R % Y == 0 else f"tile of {R} rows is not a multiple of {Y} threads in y"
        if self.name == "srows":
            R, C = shape
            return None if C % (4 * X * Y) == 0 else (f"tile of {C} columns is not a multiple of 4 x {X * Y} "
                                                      "threads (4 columns each)")
        if self.name == "svec":
            (K,) = shape
            return None if K % (4 * X * Y) == 0 else (f"subvector of {K} entries is not a multiple of 4 x {X * Y} "
                                                      "threads")
        if self.name == "rows":
            R, C = shape
            if C != X:
                return f"tile of {C} columns needs {C} threads in x, routine has {X}"
            return None if R % Y == 0 else f"tile of {R} rows is not a multiple of {Y} threads in y"
        return None

    def slots(self, shape: tuple[int, ...], X: int, Y: int) -> int:
        if self.name in ("lane", "colpart"):
            return shape[0] // X
        if self.name in ("split", "rowpart"):
            return shape[0] // Y
        if self.name == "rows":
            return shape[0] // Y
        if self.name in ("quad", "qcolpart"):
            return shape[0] // X
        if self.name == "qrows":
            return (shape[1] // X) * (shape[0] // Y)
        if self.name == "srows":
            return shape[0] * shape[1] // (X * Y)
        if self.name == "svec":
            return shape[0] // (X * Y)
        if self.name == "bcast":
            return shape[0] if shape else 1
        if self.name == "thread":
            return 1
        return 0

    def offset(self, shape: tuple[int, ...], pitch: int, X: int, Y: int) -> str | None:
        """C expression (in tx, ty, k) of slot k's offset in the element's shared layout."""
        if self.name == "lane":
            return f"tx + k * {X}"
        if self.name == "split":
            return f"ty + k * {Y}"
        if self.name == "rows":
            return f"(ty + k * {Y}) * {pitch} + tx"
        if self.name == "quad":
            return f"4 * tx + (k / 4) * {4 * X} + k % 4"
        if self.name in ("srows", "svec"):
            T = X * Y
            M = shape[-1] // (4 * T)        # 16-byte pieces of a row per thread
            col = f"4 * (tx + {X} * ty) + ((k / 4) % {M}) * {4 * T} + k % 4"
            return col if self.name == "svec" else f"(k / {4 * M}) * {pitch} + {col}"
        if self.name == "bcast":
            return "k"
        if self.name == "qrows":
            M = shape[1] // (4 * X)         # 16-byte pieces of a row per thread
            return f"(ty + (k / {4 * M}) * {Y}) * {pitch} + 4 * tx + ((k / 4) % {M}) * {4 * X} + k % 4"
        return None


MAPPINGS: dict[str, MappingDef] = {m.name: m for m in (
    MappingDef("lane", "subvector", "thread (tx, ty) owns entries tx + k*X (same in every ty)", True, True),
    MappingDef("split", "subvector", "thread (tx, ty) owns entries ty + k*Y (same in every tx)", True, True),
    MappingDef("quad", "subvector", "thread tx owns the 4 consecutive entries 4 tx + 4 X m + k of each "
               "piece m < K / 4X (16-byte accesses); slot 4 m + k", True, True, 4),
    MappingDef("rows", "tile", "thread (tx, ty) owns entries (ty + k*Y, tx); needs X == tile columns",
               True, True),
    MappingDef("qrows", "tile", "thread (tx, ty) owns the 4 consecutive entries (ty + r Y, 4 tx + 4 X m + k) "
               "of each piece m < C / 4X of each of its rows r (16-byte accesses); slot 4 (M r + m) + k",
               True, True, 4),
    MappingDef("srows", "tile", "the block's threads t = tx + X ty share every row: thread t owns the 4 "
               "consecutive entries (r, 4 t + 4 XY m + k) of each piece m < C / 4XY of every row r "
               "(16-byte accesses, a row strip read by the whole block); slot 4 (M r + m) + k", True, True, 4),
    MappingDef("svec", "subvector", "thread t = tx + X ty owns the 4 consecutive entries 4 t + 4 XY m + k of "
               "each piece m < K / 4XY (the columns of mapping srows); slot 4 m + k", True, True, 4),
    MappingDef("bcast", "subvector", "every thread holds every entry (slot k = entry k): a result complete "
               "in the block, broadcast to all its threads", True, True),
    MappingDef("qcolpart", "subvector", "thread (tx, ty) holds a partial of the entries of the quad "
               "mapping; the entry is the sum over ty (registers only)", True, False),
    MappingDef("rowpart", "subvector", "thread (tx, ty) holds a partial of entries ty + k*Y; the entry is "
               "the sum over tx (registers only)", True, False),
    MappingDef("colpart", "subvector", "thread (tx, ty) holds a partial of entries tx + k*X; the entry is "
               "the sum over ty (registers only)", True, False),
    MappingDef("thread", "scalar", "each thread holds its own partial value (registers only)", True, False),
    MappingDef("any", "*", "arbitrary indexing through e.at(...) (shared memory only)", False, True),
)}
