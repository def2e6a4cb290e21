"""NVRTC compilation through CuPy.

CuPy keeps compiled binaries in an on-disk cache (``~/.cupy/kernel_cache`` or
``$CUPY_CACHE_DIR``) keyed by the source text, the options, the GPU architecture, the NVRTC
version and the CuPy version.  The source kfuse generates embeds every choice that changes
the binary (element type, library digest, macros, iterations), so that key is complete.  On
top of it an in-process table avoids re-loading modules.
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

from ..env import nvrtc_options
from ..errors import CompileError
from .gpu import cupy

OPTIONS = ("-std=c++17",)


def options() -> tuple[str, ...]:
    """NVRTC options: kfuse's, then those in $KFUSE_NVRTC_OPTIONS (e.g. "-lineinfo")."""
    return OPTIONS + nvrtc_options()          # a KfuseError when they do not split


_modules: dict[tuple[str, tuple[str, ...], int], object] = {}
_before: list[Callable[[], None]] = []


def before_compile(check: Callable[[], None]) -> None:
    """Run ``check`` before each module ``load_module`` compiles from now on: it raises to refuse
    the compile (``codegen/barrier_check.py``: the library routines the process has put into
    modules are checked for barriers first, with NVRTC, where no compiler could check them when
    the module was generated).  Registered once however often it is given."""
    if check not in _before:
        _before.append(check)


def ptx_target() -> tuple[str, tuple[str, ...]]:
    """(NVRTC's name and version, the options to compile PTX with as ``load_module`` compiles
    modules: the architecture CuPy chooses for the current device -- its private ``_get_arch``,
    else the device's, else sm_90 -- then ``options()``).  Raises LaunchError without CuPy."""
    cp = cupy()
    from cupy_backends.cuda.libs import nvrtc
    major, minor = nvrtc.getVersion()
    try:
        arch = str(cp.cuda.compiler._get_arch())       # the architecture CuPy compiles modules for
    except Exception:   # noqa: BLE001 - another CuPy, no device: the device's, else sm_90
        try:
            arch = str(cp.cuda.Device().compute_capability)
        except Exception:   # noqa: BLE001 - no device
            arch = "90"
    return f"nvrtc {major}.{minor}", (f"-arch=compute_{arch}",) + options()


def toolkit_headers() -> tuple[str, ...]:
    """``-I`` of the CUDA toolkit's headers where CuPy finds the toolkit."""
    try:
        root = cupy().cuda.get_cuda_path()
    except Exception:   # noqa: BLE001 - no CuPy or no toolkit: NVRTC's own headers only
        return ()
    folder = os.path.join(root, "include") if root else ""
    return (f"-I{folder}",) if folder and os.path.isdir(folder) else ()


def compile_ptx(source: str, opts: tuple[str, ...], name: str = "kfuse-check.cu") -> str:
    """NVRTC's PTX of ``source`` with ``opts`` (``ptx_target``'s, then ``-I`` folders);
    CompileError with the log when NVRTC refuses it."""
    cupy()
    from cupy_backends.cuda.libs import nvrtc
    prog = nvrtc.createProgram(source, name, (), ())
    try:
        nvrtc.compileProgram(prog, list(opts))
        ptx = nvrtc.getPTX(prog)
    except nvrtc.NVRTCError:
        raise CompileError(f"NVRTC (options {' '.join(opts)}):\n{nvrtc.getProgramLog(prog)}") from None
    finally:
        nvrtc.destroyProgram(prog)
    return ptx.decode() if isinstance(ptx, bytes) else str(ptx)


def excerpt(source: str, log: str, context: int = 3, most: int = 3) -> str:
    """The numbered lines around the first ``most`` line numbers the compiler log names
    (``file(123): error`` from NVRTC and nvcc), the error line marked with ``>``."""
    lines = source.splitlines()
    wanted = []
    for m in re.finditer(r"\((\d+)\): (?:catastrophic )?error", log):
        n = int(m.group(1))
        if 1 <= n <= len(lines) and n not in wanted:
            wanted.append(n)
    parts = []
    for n in wanted[:most]:
        lo, hi = max(1, n - context), min(len(lines), n + context)
        parts.append("\n".join(f"{'>' if i == n else ' '}{i:5d}  {lines[i - 1]}" for i in range(lo, hi + 1)))
    return "\n...\n".join(parts)


def save_source(source: str) -> Path:
    """Write the full generated source where the user can read it; its name is its digest."""
    folder = Path(tempfile.mkdtemp(prefix="kfuse-failed-"))     # private (0700), a new name each time
    path = folder / f"{hashlib.sha256(source.encode()).hexdigest()[:16]}.cu"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    return path


def compile_error(tool: str, log: str, source: str) -> CompileError:
    """A CompileError with the log, the lines around the errors and the path of the full source."""
    try:
        where = f"full source in {save_source(source)}"
    except OSError as e:
        where = f"full source not saved ({e})"
    shown = excerpt(source, log)
    return CompileError(f"{tool} rejected the generated code:\n{log.rstrip()}\n"
                        + (f"--- around the error ---\n{shown}\n" if shown else "") + f"--- {where}")


def load_module(source: str, relocatable: bool = False):
    """Compile (or fetch from the caches) a CUDA module; raises CompileError with the log.
    ``relocatable``: compiled with ``-rdc=true`` and linked with the device runtime library
    (``libcudadevrt``, for ``cudaGraphSetConditional``)."""
    cp = cupy()
    device = cp.cuda.Device().id
    opts = options() + (("-rdc=true",) if relocatable else ())
    key = (hashlib.sha256(source.encode()).hexdigest(), opts, device)
    mod = _modules.get(key)
    if mod is None:
        for check in tuple(_before):
            check()
        try:
            mod = cp.RawModule(code=source, options=opts, backend="nvrtc")
            mod.compile()
        except cp.cuda.compiler.CompileException as e:
            raise compile_error(f"NVRTC (options {' '.join(opts)})", e.get_message(), source) from None
        except (RuntimeError, OSError) as e:      # e.g. libcudadevrt.a not found for -rdc=true
            raise CompileError(f"linking the device runtime for {' '.join(opts)} failed: {e}") from None
        _modules[key] = mod
    return mod
