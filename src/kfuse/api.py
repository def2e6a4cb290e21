"""The user-facing entry point: ``kfuse.compile`` and the compiled program it returns."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from .codegen.kernel import KernelCode
from .codegen.module import DTYPES, module_source
from .errors import KfuseError, ScriptError
from .frontend import parse_script
from .graph import DependencyGraph
from .library.loader import load_library
from .library.schema import Library
from .plan import Plan, PlanSearch, generate, unfused_plan
from .program import Program


def _read_script(script: str | Path) -> tuple[str, str]:
    """(source, file name) for a path or for script text."""
    if isinstance(script, Path) or ("\n" not in str(script) and ";" not in str(script)):
        path = Path(script)
        if not path.is_file():
            raise ScriptError(f"no such script file: {path}", str(path))
        return path.read_text(), str(path)
    return str(script), "<script>"


@dataclass
class CompiledScript:
    """A script compiled for one element type: its program, plan and CUDA source."""
    program: Program
    library: Library
    dtype: str
    plan: Plan
    kernels: list[KernelCode] = field(repr=False)
    search: PlanSearch | None = field(default=None, repr=False)   # the ranked plan space (fused compiles)

    def with_plan(self, plan: Plan) -> "CompiledScript":
        """The same script compiled with another plan (e.g. the next best, for empirical search)."""
        return CompiledScript(self.program, self.library, self.dtype, plan, generate(plan, self.library),
                              self.search)

    @cached_property
    def cuda_source(self) -> str:
        return module_source(self.kernels, self.library, self.dtype,
                             title=f"script {self.program.file} ({self.program.name})\n" + self.describe())

    @property
    def graph(self) -> DependencyGraph:
        return DependencyGraph(self.program)

    def describe(self) -> str:
        """The plan with each kernel's launch configuration."""
        lines = [self.plan.describe()]
        for k in self.kernels:
            L = k.launch
            lines.append(f"  {L.kernel}: {L.threads} threads per block, {L.smem_bytes_per_real} shared entries, "
                         f"{k.barriers} barrier(s), {len(k.placement.registers)} element(s) in registers"
                         + (f"; cleared first: {', '.join(v.name for v, _ in L.clears)}" if L.clears else ""))
        return "\n".join(lines)

    def module(self, device: int, orders: tuple[int, ...] = ()):
        """The compiled module on a device, built for the kernels' orders (runtime/order.py; none
        given: order 0 throughout), compiled once per choice, then cached."""
        cache = self.__dict__.setdefault("_modules", {})
        key = (device, tuple(orders))
        if key not in cache:
            from .runtime.compiler import load_module
            from .runtime.order import order_defines
            source = self.cuda_source
            missing = order_defines(self.kernels, orders, source)
            if missing and self.__dict__.get("_shared_source"):
                # a module shared with other programs, built for other orders: this program's
                # own module is smaller to compile than the shared one again
                source = CompiledScript.cuda_source.func(self)
                missing = order_defines(self.kernels, orders, source)
            cache[key] = load_module(missing + source)
        return cache[key]

    def functions(self, device: int, orders: tuple[int, ...] = ()) -> list:
        """The compiled kernels on a device, in launch order."""
        cache = self.__dict__.setdefault("_functions", {})
        key = (device, tuple(orders))
        if key not in cache:
            module = self.module(device, orders)
            cache[key] = [module.get_function(k.launch.kernel) for k in self.kernels]
        return cache[key]

    def fill_function(self, device: int, orders: tuple[int, ...] = ()):
        """The module's kf_fill kernel (clears reduced outputs before a kernel)."""
        return self.module(device, orders).get_function("kf_fill")

    def entries(self, dims: dict[int, int]) -> dict[int, int]:
        """Value id -> number of entries, for dimension sizes ``dims`` (dimension id -> size)."""
        out = {}
        for v in self.program.values:
            n = 1
            for d in v.dims:
                n *= dims[d]
            out[v.id] = n
        return out

    def traffic(self, dims: dict[int, int]) -> int:
        """Bytes the plan moves through global memory: per kernel, each array it loads or stores
        once (re-reads of small invariant subvectors by several blocks are not counted)."""
        n = self.entries(dims)
        size = np.dtype(self.dtype).itemsize
        total = 0
        for k in self.kernels:
            moved = {a.value.id for a in k.launch.args if a.kind == "array"}
            total += sum(n[v] for v in moved) * size
        return total

    def compulsory_traffic(self, dims: dict[int, int]) -> int:
        """Bytes if every input were read once and every output written once."""
        n = self.entries(dims)
        size = np.dtype(self.dtype).itemsize
        vals = [v for v in self.program.inputs if v.type != "scalar"] + list(self.program.outputs)
        return sum(n[v.id] for v in vals) * size

    def flops(self, dims: dict[int, int]) -> int:
        """Floating-point operations of the script, from the library's per-function counts."""
        n = self.entries(dims)
        total = 0
        for c in self.program.calls:
            if c.function.flops is None:
                raise KfuseError(f"{c.function.name} ({c.function.file}) declares no flops count")
            scope = {p: (n[v.id] if hasattr(v, "id") else 1) for p, v in c.bindings().items()}
            total += int(eval(c.function.flops, {"__builtins__": {}}, scope))  # noqa: S307 - library field
        return total

    def __call__(self, out: dict | None = None, sync: bool = False, **inputs):
        """Run on the GPU.  Inputs by script name (CuPy arrays, torch CUDA tensors, numbers for
        scalars); returns CuPy arrays in the order of the script's return statement (a single
        array when it returns one value).  ``out`` maps returned names to preallocated arrays;
        ``sync=True`` waits for the kernels and reports any execution error."""
        from .runtime.executor import run
        return run(self, inputs, out=out, sync=sync)

    def tune(self, top: int = 20, sizes: dict[str, int] | None = None, reps: int = 30, store=True,
             log=None, iterations: bool = True) -> "CompiledScript":
        """Empirical search: compile the ``top`` plans ranked first by the model (one NVRTC
        compile for all of them), check each against the float64 reference on random inputs of
        ``sizes`` (script size name -> value; default the model's), time each with CUDA events,
        and return the program with the fastest; then (``iterations``) try explicit serial-iteration
        counts for each of its kernels against the launch-time choice.  The winner is remembered in the tuning store
        (``store=False``: not; a path or TuningStore: that one), and later compiles for the same
        GPU, script, library, dtype and size class use it at once."""
        from .tuning_run import tune
        return tune(self, top=top, sizes=sizes, reps=reps, store=store, log=log, iterations=iterations)

    def bind(self, out: dict | None = None, **inputs):
        """Check and bind arguments once; the returned callable only launches (for repeated runs
        and timing). Its outputs are allocated once and reused."""
        from .runtime.executor import BoundCall
        return BoundCall(self, inputs, out=out)


def share_module(progs: list[CompiledScript], title: str, dims: dict[int, int] | None = None) -> str:
    """Give programs of one script (plans with distinct kernel names) one CUDA module holding all
    their kernels: one NVRTC compile instead of one each.  With ``dims`` (on a GPU) each program's
    block orders at those sizes are built in (runtime/order.py); a program bound at other sizes
    whose orders differ compiles its own module."""
    base = progs[0]
    source = module_source([k for p in progs for k in p.kernels], base.library, base.dtype, title=title)
    if dims is not None:
        from .runtime.gpu import cupy
        from .runtime.launch import pdl_available
        from .runtime.order import launch_orders, order_defines
        device = cupy().cuda.Device().id
        source = "".join(order_defines(p.kernels, launch_orders(p, dims, device, pdl_available(device)))
                         for p in progs) + source
    for p in progs:
        p.__dict__["cuda_source"] = source
        p.__dict__["_shared_source"] = True
    return source


def compile(script: str | Path, dtype: str = "float32", library: str | Path | list | None = None,
            shipped_library: bool = True, fuse: bool = True, sizes: dict[str, int] | None = None,
            tuned: bool | str | Path = True, calibration=True) -> CompiledScript:   # noqa: A001 - mirrors re.compile
    """Parse a script (path or text), plan it, and generate CUDA for ``dtype``.

    ``library`` adds user library folders to the shipped BLAS library (``shipped_library=False``
    leaves it out).  ``fuse=False`` gives every call its own kernel (the paper's code without
    fusions); otherwise the plan predicted fastest at ``sizes`` (script size name -> value;
    8192 per matrix side, 2^24 per vector by default) is chosen -- unless the tuning store
    (``tuned``: True for the default store, a path for another, False for none) holds a measured
    winner for this GPU, script, library, dtype and size class.  Plans are ranked by the calibrated
    model (``calibration``: True to look up this GPU's calibration of the library, else a shipped
    one, else the transfer model -- with a notice; False for the transfer model; a path for that
    calibration file; or a model object).  Needs no GPU; running the result needs CuPy.
    """
    if dtype not in DTYPES:
        raise KfuseError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    folders = [] if library is None else ([library] if isinstance(library, (str, Path)) else list(library))
    with _collector_paused():
        lib = load_library(*folders, shipped=shipped_library)
        source, file = _read_script(script)
        program = parse_script(source, lib, file)
        if fuse:
            search = PlanSearch(program, lib, sizes=sizes, itemsize=np.dtype(dtype).itemsize,
                                model=_ranking_model(lib, dtype, calibration))
            plan = _stored_plan(program, search, dtype, tuned) or search.best()
        else:
            search, plan = None, unfused_plan(program, lib)
        kernels = generate(plan, lib)
    compiled = CompiledScript(program, lib, dtype, plan, kernels)
    compiled.search = search
    return compiled


@contextmanager
def _collector_paused():
    """Planning allocates many objects that live until the plan is chosen and makes almost no
    reference cycles: Python's cyclic collector, run every few hundred allocations, would rescan
    them again and again (about 40% of the planning time).  It is paused meanwhile and resumed
    after (when it was running); the few cycles are collected later."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _ranking_model(lib: Library, dtype: str, calibration):
    from .calibration.predict import CalibratedModel, choose_model
    from .model import DEFAULT_MACHINE
    if calibration is False:
        return DEFAULT_MACHINE
    if calibration is True or calibration is None:
        return choose_model(lib, dtype)
    if isinstance(calibration, (str, Path)):
        from .calibration.store import find
        from .tuning import gpu_name
        exact, other = find(gpu_name(), lib.digest, dtype, paths=[Path(calibration)])
        if exact or other:
            return CalibratedModel(exact or other)
        raise KfuseError(f"{calibration}: no valid calibration for library {lib.digest} ({dtype})")
    return calibration


def _stored_plan(program: Program, search: PlanSearch, dtype: str, tuned) -> Plan | None:
    """The tuning store's winner for this GPU, script, library, dtype and size class, if any."""
    if tuned is False:
        return None
    from .tuning import TuningStore, gpu_name, plan_from_json, store_key
    gpu = gpu_name()
    if gpu is None:
        return None
    store = TuningStore(None if tuned is True else tuned)
    rec = store.lookup(store_key(program, gpu, dtype, search.dims))
    if rec is None:
        return None
    try:
        plan = plan_from_json(program, rec["plan"])
        generate(plan, search.lib)          # must still build
    except KfuseError as e:
        store.warn(f"stored plan for {program.name} ignored: {e}")
        return None
    return plan
