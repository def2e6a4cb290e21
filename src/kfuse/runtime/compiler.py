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
import shlex

from ..errors import CompileError
from .gpu import cupy

OPTIONS = ("-std=c++17",)


def options() -> tuple[str, ...]:
    """NVRTC options: kfuse's, then those in $KFUSE_NVRTC_OPTIONS (e.g. "-lineinfo")."""
    return OPTIONS + tuple(shlex.split(os.environ.get("KFUSE_NVRTC_OPTIONS", "")))


_modules: dict[tuple[str, tuple[str, ...], int], object] = {}


def numbered(source: str) -> str:
    return "\n".join(f"{n:5d}  {line}" for n, line in enumerate(source.splitlines(), 1))


def load_module(source: str):
    """Compile (or fetch from the caches) a CUDA module; raises CompileError with the log."""
    cp = cupy()
    device = cp.cuda.Device().id
    opts = options()
    key = (hashlib.sha256(source.encode()).hexdigest(), opts, device)
    mod = _modules.get(key)
    if mod is None:
        try:
            mod = cp.RawModule(code=source, options=opts, backend="nvrtc")
            mod.compile()
        except cp.cuda.compiler.CompileException as e:
            raise CompileError(f"NVRTC rejected the generated code (options {' '.join(opts)}):\n"
                               f"{e.get_message()}\n--- source ---\n{numbered(source)}") from None
        _modules[key] = mod
    return mod
