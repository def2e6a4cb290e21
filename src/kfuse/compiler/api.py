"""The user-facing entry point: ``kfuse.compile`` parses, plans and generates a script's CUDA;
``compile_program`` plans and generates a program already built (the jit's).  Both run the
pipeline's stages (``pipeline.py``) in a compiler session of their own (``session.py``), which
keeps the programs planned later for other size classes and device scalars."""
from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .pipeline import Options, parse
from ..codegen.module import DTYPES
from .compiled import CompiledScript
from ..errors import KfuseError, ScriptError
from ..env import nvrtc_options
from ..frontend.parser import MAX_SIZE
from ..fusion.space import SPANS
from ..fusion.stages import SearchOptions
from ..ir.program import SIZE_WORDS, Program
from ..library.loader import load_library
from ..library.schema import Library
from ..progress import PassTimes
from ..runtime.gpu import clusters_available
from .session import CompilerSession


def _read_script(script: str | Path) -> tuple[str, str]:
    """(source, file name) for a path or for script text.  A ``Path``, or a string naming an
    existing file, is read as a file; other strings with a newline or ``;`` are script text."""
    if not isinstance(script, (str, os.PathLike)):
        raise KfuseError(f"a script is a path or the text of a script, got {type(script).__name__} {script!r:.60}")
    if isinstance(script, str) and not script.strip():
        raise KfuseError("the script is empty: give a path or the text of a script")
    if isinstance(script, os.PathLike) or not ("\n" in str(script) or ";" in str(script)) or _is_file(str(script)):
        return read_script_file(Path(script)), os.fspath(script)
    return str(script), "<script>"


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):        # a name too long or with a NUL is no file
        return False


def read_script_file(path: Path) -> str:
    """The text of a script file (UTF-8, a leading byte-order mark dropped); a missing file, a
    folder, anything else that is not a readable regular file or text that is not UTF-8 raises
    :class:`ScriptError` naming what is wrong."""
    name = str(path)
    try:
        if path.is_dir():
            raise ScriptError("is a folder, not a script file", name)
        if not path.exists():
            raise ScriptError("no such script file", name)
        if not path.is_file():
            raise ScriptError("not a regular file (a device, pipe or socket); a script file is expected", name)
        data = path.read_bytes()
    except OSError as e:
        raise ScriptError(f"cannot read the script file: {e.strerror or e}", name) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        shown = data.split(b"\n")[line - 1].decode("utf-8", "replace")
        raise ScriptError(f"the script is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
                          name, line, col, shown) from None
    return text.removeprefix("\ufeff")


def size_names(program) -> dict:
    """Every name a size of ``program`` goes by -> its ``Dim``: the declared (or automatic) names,
    then ``<value>.len`` / ``.rows`` / ``.cols`` of every vector and matrix (the size it has after
    unification).  ``kfuse.compile(sizes=...)`` and the command line's ``--size`` read the same
    names."""
    by_name = {d.name: d for d in program.dims}
    for v in program.values:
        for word, d in zip(SIZE_WORDS.get(len(v.dims), ()), v.dims):
            by_name.setdefault(f"{v.name}.{word}", program.dims[d])
    return by_name


def check_literal(dim, value: int, given: str) -> None:
    """A size the script fixes (``vector x[5]``) given another value: a KfuseError naming both
    (planned at the other value in silence before, for arrays the call would then refuse)."""
    if dim.literal is not None and value != dim.literal:
        raise KfuseError(f"{given}: the script fixes that size at {dim.literal}")


def _resolve_sizes(program, sizes) -> dict[str, int]:
    """``sizes`` by the script's size names: a declared name, or ``<value>.len`` / ``.rows`` /
    ``.cols`` of any vector or matrix (``size_names``).  A name that is neither, a size that is
    not a positive integer, a size the script fixes at another value or two names of one size
    given different values are errors (a misspelt name would otherwise plan at the default size
    in silence)."""
    names = [d.name for d in program.dims]
    if not isinstance(sizes, dict):
        raise KfuseError(f"sizes must be a dict of size name -> int (the script's sizes: {', '.join(names)})")
    by_name = size_names(program)
    out: dict[str, int] = {}
    given: dict[str, str] = {}
    for k, v in sizes.items():
        dim = by_name.get(k)
        if dim is None:
            raise KfuseError(f"sizes names {k!r}, which is not a size of the script "
                             f"(its sizes: {', '.join(names) or 'none'})")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise KfuseError(f"sizes[{k!r}] must be a positive integer, got {v!r:.60}")
        if v > MAX_SIZE:
            raise KfuseError(f"sizes[{k!r}] is too large: about 2^{int(v).bit_length() - 1} (at most 2^48 "
                             "entries along an axis)")
        check_literal(dim, int(v), f"sizes[{k!r}] = {v}")
        if dim.name in out and out[dim.name] != int(v):
            raise KfuseError(f"sizes[{k!r}] = {v} and sizes[{given[dim.name]!r}] = {out[dim.name]} "
                             "name the same size of the script")
        out[dim.name], given[dim.name] = int(v), k
    return out


def compile(script: str | Path, dtype: str = "float32", library: str | Path | list | Library | None = None,
            shipped_library: bool = True, fuse: bool = True, sizes: dict[str, int] | None = None,
            tuned: bool | str | Path = True, calibration=True, horizontal: bool = True,
            device_scalars=(), name: str | None = None, vector_on_strips: bool = False
            ) -> CompiledScript:   # noqa: A001 - mirrors re.compile
    """Parse a script (path or text), plan it, and generate CUDA for ``dtype``.

    ``library`` adds user library folders to the shipped BLAS library (``shipped_library=False``
    leaves it out), or is a library already loaded (``kfuse.load_library``).  ``fuse=False`` gives every call its own kernel (the paper's code without
    fusions); otherwise the plan predicted fastest at ``sizes`` (script size name -> value;
    8192 per matrix side, 2^24 per vector by default) is chosen -- unless the tuning store
    (``tuned``: True for the default store, a path for another, False for none) holds a measured
    winner for this GPU, script, library, dtype and size class.  Plans are ranked by the calibrated
    model (``calibration``: True to look up this GPU's calibration of the library, else a shipped
    one, else the transfer model -- with a notice; False for the transfer model; a path for that
    calibration file; or a model object).  ``horizontal=False`` keeps kernels that exchange nothing
    apart (horizontal fusion otherwise merges them where the model predicts a launch saved).
    ``vector_on_strips=True`` lets vector calls share a kernel with matrix calls on strips of whole
    rows, once per strip on its rows (a gemv's result used by a dot or an axpy in its kernel; off by
    default: it changed random scripts' first plans with mixed results, docs/design.md, 'Strips, clusters and bands').
    ``device_scalars`` names scalar inputs that calls will bind to 0-d device arrays (kernels read
    them by address; a call that binds others so gets a program planned for that on first use).
    ``name`` names the program (kernels' comments, ``plan``; default: the file's stem or "script").
    Needs no GPU; running the result needs CuPy.
    """
    _check_dtype(dtype)
    check_tuned(tuned)
    check_flags(fuse=fuse, shipped_library=shipped_library, horizontal=horizontal, vector_on_strips=vector_on_strips)
    _check_device_scalars(device_scalars)
    if name is not None and not isinstance(name, str):
        raise KfuseError(f"name names the program: a str or None, got {type(name).__name__} {name!r:.60}")
    folders = [] if isinstance(library, Library) else library_folders(library, loaded=True)
    timer = PassTimes()
    with _collector_paused():
        with timer("library"):
            lib = library if isinstance(library, Library) else load_library(*folders, shipped=shipped_library)
        with timer("parse"):
            source, file = _read_script(script)
            program = parse(source, lib, file, name)
            _check_reserved(program)
            if device_scalars:
                program = _with_device_scalars(program, device_scalars)
        return _planned(program, lib, dtype, fuse, sizes, tuned, calibration, horizontal, vector_on_strips, timer)


def compile_program(program: Program, library: Library, dtype: str = "float32", fuse: bool = True,
                    sizes: dict[str, int] | None = None, tuned: bool | str | Path = True, calibration=True,
                    horizontal: bool = True, vector_on_strips: bool = False, timer: PassTimes | None = None
                    ) -> CompiledScript:
    """A program already built (``@kfuse.jit``'s, over ``library``) planned and generated as
    ``compile`` does a parsed script; ``timer`` holds the passes timed before (the front end)."""
    _check_dtype(dtype)
    check_tuned(tuned)
    check_flags(fuse=fuse, horizontal=horizontal, vector_on_strips=vector_on_strips)
    with _collector_paused():
        return _planned(program, library, dtype, fuse, sizes, tuned, calibration, horizontal, vector_on_strips,
                        timer or PassTimes())


def check_flags(**flags) -> None:
    """Each of ``flags`` (an on/off option of ``kfuse.compile`` or ``@kfuse.jit``) is a bool: a
    KfuseError naming it otherwise (``fuse="no"`` was true, so it fused, in silence)."""
    for key, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise KfuseError(f"{key} is True or False, got {type(value).__name__} {value!r:.60}")


def library_folders(library, loaded: bool = False) -> list:
    """The user library folders ``library`` names (``kfuse.compile``'s and ``@kfuse.jit``'s
    argument): None (none), a folder, or a list or tuple of folders, each a str or a path; a
    KfuseError naming what it got otherwise (a TypeError from pathlib before).  ``loaded``: the
    caller takes a loaded library too (the message says so)."""
    folders = [] if library is None else [library] if isinstance(library, (str, os.PathLike)) else \
        list(library) if isinstance(library, (list, tuple)) else None
    if folders is None or not all(isinstance(f, (str, os.PathLike)) for f in folders):
        raise KfuseError(f"library is a folder{', a list of folders or a loaded library' if loaded else ' or a list of folders'}"
                         f", got {type(library).__name__} {library!r:.60}")
    return folders


def _check_dtype(dtype: str) -> None:
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise KfuseError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    nvrtc_options()             # a $KFUSE_NVRTC_OPTIONS that does not split: said now, not at the first run


def check_tuned(tuned) -> None:
    """``tuned`` is True (the default tuning store), False (none) or a store file's path (a
    non-empty str or a path): anything else is a KfuseError naming it, not a TypeError of the
    store's at the first plan looked up (``kfuse.compile``, ``@kfuse.jit``)."""
    if isinstance(tuned, bool) or (isinstance(tuned, (str, os.PathLike)) and os.fspath(tuned) != ""):
        return
    raise KfuseError(f"tuned is True (the default tuning store), False (none) or the path of a tuning store, "
                     f"got {type(tuned).__name__} {tuned!r:.60}")


def _check_device_scalars(names) -> None:
    """``device_scalars`` is a scalar input's name or a list, tuple or set of them."""
    if isinstance(names, str):
        return
    if isinstance(names, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in names):
        return
    raise KfuseError("device_scalars names scalar inputs of the script: a name or a list of names, got "
                     f"{type(names).__name__} {names!r:.60}")


def _planned(program: Program, lib: Library, dtype: str, fuse: bool, sizes, tuned, calibration, horizontal: bool,
             vector_on_strips: bool, timer: PassTimes) -> CompiledScript:
    """The plan search and code generation of ``compile`` (the collector paused by the caller): a
    compiler session for the library, dtype, model and options, and its first program."""
    if sizes:
        sizes = _resolve_sizes(program, sizes)
    model = _ranking_model(lib, dtype, calibration) if fuse else None
    options = Options(fuse, tuned, SearchOptions(SPANS, horizontal, clusters_available() if fuse else True,
                                                          vector_on_strips))
    return CompilerSession(lib, dtype, options, model).compile(program, sizes, timer)


def _check_reserved(program: Program) -> None:
    """A script input named like a keyword of the call (``out``, ``sync``, ``stream``) could not
    be passed: refused here, at its name in the input statement (found among the script's tokens,
    so a statement over several lines is no matter)."""
    from ..frontend.tokens import tokenize
    from ..runtime.executor import RESERVED
    bad = [v.name for v in program.inputs if v.name in RESERVED]
    if not bad:
        return
    toks = tokenize(program.source, program.file)
    in_input = False
    for prev, tok in zip([None, *toks], toks):
        if tok.text == "input" and (prev is None or prev.text == ";"):
            in_input = True
        elif tok.text == ";":
            in_input = False
        elif in_input and tok.text in bad:
            lines = program.source.split("\n")
            raise ScriptError(f"the input {tok.text!r} has the name of a keyword of the call "
                              f"({', '.join(RESERVED)}); rename it", program.file, tok.line, tok.col,
                              lines[tok.line - 1])
    raise ScriptError(f"the input {bad[0]!r} has the name of a keyword of the call "
                      f"({', '.join(RESERVED)}); rename it", program.file)


def _with_device_scalars(program: Program, names) -> Program:
    return program.with_device_scalars(names)      # checked there: a KfuseError naming a wrong name


@contextmanager
def _collector_paused():
    """Planning allocates many objects that live until the plan is chosen and makes almost no
    reference cycles: Python's cyclic collector, run every few hundred allocations, would rescan
    them again and again (about 40% of the planning time).  It is paused meanwhile and resumed
    after (when it was running); the few cycles are collected later.  The objects made meanwhile
    go straight to the oldest generation (``gc.freeze``/``unfreeze``): resumed, the collector would
    otherwise scan them all at its next young collection (0.1-0.2 s after a long script)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.enable()


def _ranking_model(lib: Library, dtype: str, calibration):
    from ..cost.calibrated import CalibratedModel, choose_model, on_this_gpu, transfer_on_this_gpu
    if calibration is False:
        return transfer_on_this_gpu()
    if calibration is True or calibration is None:
        return choose_model(lib, dtype)
    if isinstance(calibration, (str, Path)):
        from ..cost.store import find
        from ..runtime.gpu import gpu_name
        exact, other = find(gpu_name(), lib.digest, dtype, paths=[Path(calibration)])
        found = exact or (other and on_this_gpu(other))
        if found is not None:
            return CalibratedModel(found)
        raise KfuseError(f"{calibration}: no valid calibration for library {lib.digest} ({dtype})")
    if not callable(getattr(calibration, "kernel_time", None)):
        raise KfuseError(f"calibration is True, False, a calibration file or a model with kernel_time(), "
                         f"got {type(calibration).__name__} {calibration!r:.60}")
    return calibration
