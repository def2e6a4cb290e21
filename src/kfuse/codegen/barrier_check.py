"""The compiled barrier check: a library routine compiled on its own to PTX, read for block-wide
barriers (``ptx.py``).

Routines never synchronise: the compiler places the barriers between them (a barrier inside a
routine, run under a thread guard or between the compiler's own, deadlocks or races in a fused
kernel).  The loader's text scan (``library/cusource.py``) refuses the honest cases at load, with
no compiler; but a scan of the text cannot see what the preprocessor and the compiler make of it
(literals pasted together, escapes, line splices, digraphs, ``#x``, includes, raw strings,
``cuda::barrier``).  What runs is the compiled code, so this check reads that.

A *unit* is one routine of a variant with its macro values bound, in a module of one element type.
Its check module holds the prelude and the routine files as a generated module does
(``moduleparts.py``: what the code reaches of them), and wrapper kernels (``checkwrap.py``) that
call the routine as a generated kernel does, with nothing that synchronises; a unit passes when
no wrapper of it reaches a block-wide barrier in the PTX.  Units are compiled together (one
compiler run; units of the same code once), in halves down to a unit alone where their module
does not build or holds a barrier no wrapper reaches (alone, any barrier in its module but in
kfuse's own kernels refuses it).

When and with what (``check``):

* ``module_source`` checks the units of its kernels before returning the module's text, and the
  calibration's ``probe_module`` those of its micro-kernels (``check_probes``): with NVRTC where
  CuPy is there (the architecture and options the runtime compiles the modules with), else with
  ``nvcc -ptx`` for sm_90 where nvcc is on PATH;
* with neither, the check waits, and ``runtime/compiler.load_module`` -- the one way a module
  reaches the GPU, and where CuPy's NVRTC always is -- runs it before compiling any module: every
  unit the process generated a module with is checked, with the architecture and options the
  module is compiled with, before a kernel holding it can run.

A unit passed is remembered for the process, and in kfuse's cache folder (``barrier-check/``, a
file named by the SHA-256 of the unit's check module, the compiler and its version, the
architecture and the options, holding exactly ``PASSED`` and that name: anything else there is
ignored, nothing read is run).  The shipped library's routines and the functions kfuse synthesizes
are kfuse's own: never compiled at run time (tests/test_barrier_check.py checks every shipped
routine with nvcc).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import product
from pathlib import Path
from typing import Callable, Iterable

from ..env import cache_dir
from ..errors import CompileError, KfuseError, LibraryError
from ..library.cusource import defining_file
from ..library.loader import SHIPPED
from ..library.schema import Function, Library, Routine, Variant
from . import ptx
from .checkwrap import wrappers
from .moduleparts import PERSISTENT_HEAD, PERSISTENT_HELPERS, PRELUDE, SPARSE_PRELUDE, element_defines, library_part

NVCC_ARCH = "sm_90"          # what the code is built for where no GPU says otherwise
PASSED = b"PASSED "


@dataclass(frozen=True, eq=False)
class Unit:
    """A unit (see the module docstring) with its check module's pieces (made by ``unit``)."""
    lib: Library
    dtype: str
    function: Function
    variant: Variant
    routine: Routine
    macros: tuple[tuple[str, int], ...]
    persistent: bool                # its files open as in a persistent kernel's module (__restrict__ defined away)
    sparse: bool                    # ... after the sparse prelude (a module reading a csr matrix)
    kernels: tuple[str, ...]        # its wrappers, each named @KF@<k> (``named``)
    views: tuple[str, ...]          # the shared-view structs they use
    digest: str                     # SHA-256 of its check module alone

    def named(self, n: int) -> list[str]:
        return [k.replace("@KF@", f"kf_check{n}_") for k in self.kernels]

    def entries(self, n: int) -> list[str]:
        return [f"kf_check{n}_{k}" for k in range(len(self.kernels))]


def trusted(fn: Function, var: Variant) -> bool:
    """kfuse's own routines: a synthesized function's, or a variant's whose files all ship."""
    return fn.synthesized or all(Path(f).parent == SHIPPED for f in var.files)


@cache
def own_kernels() -> frozenset[str]:
    """The kernels the preludes define (``kf_fill``, the sparse prelude's long rows): kfuse's."""
    text = PRELUDE.read_text() + SPARSE_PRELUDE.read_text()
    return frozenset(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(", text))


def module_text(units: list[Unit]) -> str:
    """The check module of units of one library, element type and preludes (wrappers of unit n
    named ``kf_check<n>_<k>``)."""
    u0 = units[0]
    kernels = [k for n, u in enumerate(units) for k in u.named(n)]
    views = list(dict.fromkeys(v for u in units for v in u.views))
    code = "\n".join(views + kernels)
    parts = ["// kfuse: library routines called alone, checked for barriers (codegen/barrier_check.py)",
             *([PERSISTENT_HEAD] if u0.persistent else []),
             *element_defines(u0.lib, u0.dtype), '#line 1 "kfuse/prelude.cuh"', PRELUDE.read_text(),
             *([PERSISTENT_HELPERS] if u0.persistent else [])]
    if u0.sparse:
        parts += ['#line 1 "kfuse/sparse.cuh"', SPARSE_PRELUDE.read_text()]
    for f in dict.fromkeys(f for u in units for f in u.variant.files):
        parts += library_part(u0.lib, Path(f), code)
    parts += ['#line 1 "kfuse-barrier-check.cu"', *views, *kernels]
    return "\n".join(parts) + "\n"


_units: dict[tuple, Unit | None] = {}      # (library digest, dtype, function, variant, routine, macros) -> unit


def unit(lib: Library, dtype: str, fn: Function, var: Variant, r: Routine, macros: tuple[tuple[str, int], ...],
         persistent: bool = False, sparse: bool = False) -> Unit | None:
    """The unit of a routine with these macros, its files opening as in a module of a persistent
    kernel or with the sparse prelude (always for a function of a csr matrix) or neither: what a
    file may test with ``#ifdef`` is what the check compiles (None: its mappings do not fit its
    elements with these macros, so no kernel holds it)."""
    sparse = sparse or any(p.type == "csr" for p in fn.params)
    key = (lib.digest, dtype, fn.name, len(fn.inputs), var.name, r.name, macros, persistent, sparse)
    if key not in _units:
        made = wrappers(lib, fn, var, r, macros)
        if made is None:
            _units[key] = None
        else:
            u = Unit(lib, dtype, fn, var, r, macros, persistent, sparse, tuple(made[0]), tuple(made[1]), "")
            _units[key] = replace(u, digest=hashlib.sha256(module_text([u]).encode()).hexdigest())
    return _units[key]


# -- compilers -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compiler:
    """What compiles check modules to PTX: ``compile(source, options)``."""
    name: str                       # for messages: "nvcc 13.0.88", "nvrtc 12.8"
    ident: str                      # for the keys: the compiler's whole version
    options: tuple[str, ...]        # the architecture first
    compile: Callable[[str, tuple[str, ...]], str] = field(compare=False)


@cache
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip()


def _nvcc_ptx(nvcc: str, source: str, opts: tuple[str, ...]) -> str:
    with tempfile.TemporaryDirectory(prefix="kfuse-check-") as tmp:
        cu, out = Path(tmp) / "kfuse-check.cu", Path(tmp) / "kfuse-check.ptx"
        cu.write_text(source)
        proc = subprocess.run([nvcc, "-ptx", *opts, "-o", str(out), str(cu)], capture_output=True, text=True,
                              cwd=tmp)
        if proc.returncode != 0:
            raise CompileError(f"nvcc ({' '.join(opts)}):\n{proc.stderr}")
        return out.read_text()


def nvrtc_compiler() -> Compiler:
    """NVRTC through CuPy, with the architecture and options the runtime compiles modules with
    (LaunchError without CuPy), and ``-ftz=true``, which CuPy adds to them.  An ``#include "..."``
    is looked for where CuPy's compile looks: in no folder of the user's (``--no-source-include``:
    CuPy names the program in an empty folder of its own), or from the working directory where
    CuPy compiles in memory (``CUPY_CACHE_IN_MEMORY``: a program named "")."""
    from ..runtime import compiler
    name, opts = compiler.ptx_target()
    in_memory = os.environ.get("CUPY_CACHE_IN_MEMORY", "0").strip().lower() not in ("", "0", "false", "no")
    opts += ("-ftz=true",) + (() if in_memory else ("--no-source-include",)) + compiler.toolkit_headers()
    program = "" if in_memory else "kfuse-check.cu"
    return Compiler(name, name, opts, lambda source, o: compiler.compile_ptx(source, o, program))


def nvcc_compiler() -> Compiler | None:
    """``nvcc -ptx`` for sm_90 where nvcc is on PATH, run in an empty folder (an ``#include
    "..."`` finds no file of the user's, as a module CuPy compiles in a folder of its own)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    version = _nvcc_version(nvcc)
    m = re.search(r"V(\d[\d.]*)", version)
    return Compiler(f"nvcc {m.group(1) if m else '?'}", version, (f"-arch={NVCC_ARCH}", "-std=c++17"),
                    lambda source, opts: _nvcc_ptx(nvcc, source, opts))


def available() -> Compiler | None:
    """The compiler that checks units here and now: NVRTC, else nvcc, else None."""
    try:
        return nvrtc_compiler()
    except Exception:   # noqa: BLE001 - no CuPy, no NVRTC library: nvcc, or none
        return nvcc_compiler()


# -- checking ----------------------------------------------------------------------------------
_passed: set[str] = set()            # keys of the units passed in this process
_required: list[Unit] = []          # every unit a module was generated with, checked or waiting
_done: dict[tuple, int] = {}         # compiler (ident, options) -> how many of _required it passed


def _key(u: Unit, comp: Compiler) -> str:
    return hashlib.sha256("\0".join([u.digest, comp.ident, *comp.options]).encode()).hexdigest()


def _stored(key: str) -> bool:
    try:
        path = cache_dir() / "barrier-check" / key
        return path.is_file() and path.stat().st_size < 200 and path.read_bytes() == PASSED + key.encode() + b"\n"
    except (OSError, KfuseError):
        return False


def _store(key: str) -> None:
    try:
        folder = cache_dir() / "barrier-check"
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(PASSED + key.encode() + b"\n")
        os.replace(tmp, folder / key)
    except (OSError, KfuseError):
        pass                         # a cache that cannot be written: checked again next time


def _field(u: Unit) -> str:
    return f"function {u.function.name}.variant.{u.variant.name}.routine.{u.routine.name}.fn"


def _where(u: Unit, comp: Compiler) -> str:
    file = defining_file(u.lib, u.variant.files, u.routine.fn).name
    macros = "".join(f", {k}={v}" for k, v in u.macros)
    return f"{u.routine.fn} ({file}; compiled by {comp.name}, {comp.options[0]}, {u.dtype}{macros})"


def _barrier_error(u: Unit, comp: Compiler, found: str) -> LibraryError:
    return LibraryError(u.function.file, _field(u), (
        f"{_where(u, comp)}: its compiled code contains the block-wide barrier instruction {found!r} (PTX): "
        "routines must not synchronise (no __syncthreads(), bar/barrier/mbarrier instruction, cuda::barrier "
        "or cooperative groups' sync(), however spelled) -- the compiler places the barriers between "
        "routines, and one inside a routine deadlocks or races once the routine is fused"))


def _compile_error(u: Unit, comp: Compiler, log: str) -> LibraryError:
    log = log if len(log) < 2000 else log[:2000] + " ..."
    return LibraryError(u.function.file, _field(u), (
        f"{_where(u, comp)}: does not compile on its own, called as a generated kernel calls it, so "
        f"the barrier check cannot read its code:\n{log}"))


def _verdicts(units: list[Unit], comp: Compiler) -> dict[Unit, tuple[str, str] | None]:
    """Compile ``units`` (one library, element type and preludes) together: unit -> None where
    it passes, ("barrier", the instruction) or ("compile", the log) where it does not.  A module
    that does not build, or holds a barrier no wrapper reaches, is split in halves down to units
    alone: one of them then fails on any barrier in its module."""
    def halves() -> dict[Unit, tuple[str, str] | None]:
        mid = len(units) // 2
        return {**_verdicts(units[:mid], comp), **_verdicts(units[mid:], comp)}
    try:
        text = comp.compile(module_text(units), comp.options)
    except CompileError as e:
        return halves() if len(units) > 1 else {units[0]: ("compile", str(e))}
    found, elsewhere = ptx.reached(text, [e for n, u in enumerate(units) for e in u.entries(n)], own_kernels())
    if elsewhere and len(units) > 1:
        return halves()
    out: dict[Unit, tuple[str, str] | None] = {}
    for n, u in enumerate(units):
        hit = next((found[e] for e in u.entries(n) if e in found), None) or (elsewhere[0] if elsewhere else None)
        out[u] = ("barrier", hit) if hit else None
    return out


_failed: dict[str, tuple[str, str]] = {}     # key -> why a unit failed in this process
_lock = threading.Lock()                     # over _required and _done


def run(units: Iterable[Unit], comp: Compiler) -> None:
    """Check the units not decided yet with ``comp`` (one compiler run per library, element type
    and preludes); raises the LibraryError of the first that reaches a barrier or does not build
    alone.  (Two threads may compile a unit twice: the same verdict.)"""
    units = list(dict.fromkeys(units))
    groups: dict[tuple, dict[str, Unit]] = {}     # units of the same key (a routine of several
    for u in units:                                 # functions, the same code) compiled once
        key = _key(u, comp)
        if key in _passed or key in _failed:
            continue
        if _stored(key):
            _passed.add(key)
            continue
        groups.setdefault((id(u.lib), u.dtype, u.persistent, u.sparse), {}).setdefault(key, u)
    for group in groups.values():
        for u, verdict in _verdicts(list(group.values()), comp).items():
            key = _key(u, comp)
            if verdict is None:
                _passed.add(key)
                _store(key)
            else:
                _failed[key] = verdict
    for u in units:
        verdict = _failed.get(_key(u, comp))
        if verdict is not None:
            kind, detail = verdict
            raise _barrier_error(u, comp, detail) if kind == "barrier" else _compile_error(u, comp, detail)


def check(units: Iterable[Unit | None]) -> None:
    """Check units that a module is generated with (see the module docstring: now with NVRTC or
    nvcc, else before the runtime compiles any module)."""
    todo = [u for u in dict.fromkeys(units) if u is not None]
    if not todo:
        return
    comp = available()
    if comp is not None:
        run(todo, comp)             # raises before the units are required: no module holds them
    from ..runtime.compiler import before_compile
    before_compile(before_gpu_compile)
    with _lock:
        known = set(map(id, _required))
        _required.extend(u for u in todo if id(u) not in known)


def before_gpu_compile() -> None:
    """``load_module``'s check: every unit the process generated a module with, passed with
    NVRTC as the runtime compiles the module (the device's architecture, the options)."""
    if not _required:
        return
    comp = nvrtc_compiler()
    target = (comp.ident, comp.options)
    with _lock:
        count, done = len(_required), _done.get(target, 0)
        todo = _required[done:count]
    if todo:
        run(todo, comp)
        with _lock:
            _done[target] = max(_done.get(target, 0), count)


def check_kernels(kernels, lib: Library, dtype: str, persistent: bool = False, sparse: bool = False) -> None:
    """``module_source``'s check: the routines of the kernels' calls that kfuse does not trust,
    with the macros each call chose, their files opening as in the module (of a persistent kernel,
    with the sparse prelude)."""
    check(unit(lib, dtype, kc.call.function, kc.variant, r, kc.macros, persistent, sparse)
          for k in kernels for kc in k.spec.calls if not trusted(kc.call.function, kc.variant)
          for r in kc.variant.routines)


def library_units(lib: Library, dtype: str, everything: bool = False) -> list[Unit]:
    """The units of every routine of every variant and macro value of ``lib`` (kfuse's own too
    with ``everything``)."""
    out = []
    for fn in lib.functions:
        for var in fn.variants:
            if not everything and trusted(fn, var):
                continue
            names = list(var.macros)
            for values in product(*(var.macros[n] for n in names)):
                for r in var.routines:
                    u = unit(lib, dtype, fn, var, r, tuple(zip(names, values)))
                    if u is not None:
                        out.append(u)
    return out


def check_probes(lib: Library, dtype: str, probes) -> None:
    """The calibration's check: the routines its micro-kernels call -- each probe's routine file(s),
    C++ function and macro values -- in every variant kfuse does not trust that has them."""
    wanted = {(tuple(p.files or (p.source,)), p.fn, tuple(p.macros)) for p in probes}
    check(unit(lib, dtype, fn, var, r, m) for fn in lib.functions for var in fn.variants if not trusted(fn, var)
          for r in var.routines for files, name, m in wanted
          if name == r.fn and files == tuple(map(str, var.files)) and tuple(k for k, _ in m) == tuple(var.macros))
