"""Every generated module compiles with nvcc for sm_90, and for sm_80 (the A100: the code paths
without clusters, PDL or vector reductions) (fails, not skips, without nvcc).

``nvcc_compile`` remembers the builds that passed, keyed by the digest of nvcc's version, its
arguments and the source (``build/test-nvcc/``, an ignored folder; ``KFUSE_TEST_NVCC_CACHE=0`` turns
it off): the same source given to the same compiler builds the same way, so a second run of the
suite builds only what changed.  A failed build is never remembered."""
import hashlib
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import pytest

import kfuse
from kfuse.calibration.probes import macro_choices
from kfuse.ir.kernel import KernelCall, KernelSpec
from kfuse.codegen.kernel import build_kernel
from kfuse.codegen.module import module_source
from kfuse.errors import FusionError
from kfuse.frontend import parse_script

from conftest import EXAMPLES, ROOT

NVCC_CACHE = ROOT / "build" / "test-nvcc"


@cache
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout


def nvcc_compile(nvcc, source, tmp_path, name="k", spills=False, arch="sm_90", optimise=True):
    """Build ``source`` for ``arch`` with warnings as errors (``spills``: register spills too).
    ``optimise=False`` builds it unoptimised (``-Xcicc -O0 -Xptxas -O0``): the whole module is
    still parsed, checked and assembled, for modules whose optimisation alone takes minutes (a
    halo recomputing lap7 at each of lap27's 27 points: 220 s against 7 on 2 cores)."""
    args = [f"-arch={arch}", "-cubin", "-std=c++17", "-Werror", "all-warnings",
            *(["-Xptxas", "-warn-spills"] if spills else []),
            *([] if optimise else ["-Xcicc", "-O0", "-Xptxas", "-O0"])]
    digest = hashlib.sha256("\0".join([_nvcc_version(nvcc), *args, source]).encode()).hexdigest()
    passed = NVCC_CACHE / digest
    cached = os.environ.get("KFUSE_TEST_NVCC_CACHE", "1") != "0"
    if cached and passed.is_file():
        return
    cu = tmp_path / f"{name}.cu"
    cu.write_text(source)
    proc = subprocess.run([nvcc, *args, "-o", str(tmp_path / f"{name}.cubin"), str(cu)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    if cached:
        NVCC_CACHE.mkdir(parents=True, exist_ok=True)
        passed.write_text(f"{arch} {name}\n")


def nvcc_compile_all(nvcc, sources, tmp_path, name="k", arch="sm_90", optimise=True):
    """Build each of ``sources`` (separate modules) as ``nvcc_compile`` does, as many at a time as
    there are cores: nvcc's time grows faster than a module's length (one module of 146,000 lines
    took 388 s, its 32 pieces about 80 s in all)."""
    def one(item):
        n, source = item
        nvcc_compile(nvcc, source, tmp_path, f"{name}_{n}", arch=arch, optimise=optimise)
    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        list(pool.map(one, enumerate(sources)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_compiles(nvcc, tmp_path, path, dtype):
    nvcc_compile(nvcc, kfuse.compile(path, dtype=dtype).cuda_source, tmp_path)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_examples_compile_for_an_older_gpu(nvcc, tmp_path, dtype):
    """The examples' modules (one file) for sm_80: where a GPU has no clusters, programmatic
    dependent launch or 16-byte vector reductions, the prelude's fallbacks must build."""
    sources = [kfuse.compile(path, dtype=dtype, name=path.stem).cuda_source for path in EXAMPLES]
    for n, src in enumerate(sources):
        nvcc_compile(nvcc, src, tmp_path, f"ex{n}", arch="sm_80")


@pytest.mark.slow
def test_every_variant_and_macro_compiles(nvcc, tmp_path, lib):
    """One module holding a kernel for every function, variant and macro value."""
    kernels, refused = [], []
    for fn in lib.functions:
        ins = ", ".join(p.name for p in fn.inputs)
        decl = "; ".join(f"{p.type} {p.name}" for p in fn.params)
        prog = parse_script(f"{decl}; input {ins}; out = {fn.name}({ins}); return out;", lib)
        call = prog.calls[0]
        for var in fn.variants:
            if var.whole and fn.nesting == 1:
                continue    # on the rows of strips, never alone: test_onepass_rows builds them beside a gemv
            for macros in macro_choices(var):
                for ipb in var.instances_per_block[:2]:
                    spec = KernelSpec(f"k{len(kernels)}", (KernelCall(call, var, macros),), ipb=ipb,
                                      stores=frozenset({call.outputs[0].id}))
                    try:
                        kernels.append(build_kernel(spec, lib))
                    except FusionError as e:    # only combinations that do not fit on chip (or, for
                        # strips of whole rows, threads whose 16-byte pieces do not tile the strip)
                        assert "shared entries" in str(e) or "register entries" in str(e) or (
                            var.whole and "is not a multiple of 4 x" in str(e)), str(e)
                        refused.append(str(e))
    assert len(kernels) > 30 and len(refused) < len(kernels) / 4
    nvcc_compile(nvcc, module_source(kernels, lib, "float64"), tmp_path, "all")
    # sm_80 (no thread-block clusters: the planner leaves their variants out there)
    older = [k for k in kernels if k.launch.cluster == 1]
    nvcc_compile(nvcc, module_source(older, lib, "float32"), tmp_path, "all_sm_80", arch="sm_80")


def test_nvrtc_options_from_the_environment(monkeypatch):
    """$KFUSE_NVRTC_OPTIONS adds NVRTC options after kfuse's own, shell-quoted; modules compiled
    with other options are other modules (the in-process cache is keyed by them too)."""
    from types import SimpleNamespace

    from kfuse.runtime import compiler

    seen = []

    class RawModule:
        def __init__(self, code, options, backend):
            seen.append((code, options, backend))

        def compile(self):
            pass

    cp = SimpleNamespace(RawModule=RawModule, cuda=SimpleNamespace(Device=lambda: SimpleNamespace(id=0)))
    monkeypatch.setattr(compiler, "cupy", lambda: cp)
    monkeypatch.setattr(compiler, "_modules", {})
    monkeypatch.delenv("KFUSE_NVRTC_OPTIONS", raising=False)
    assert compiler.options() == compiler.OPTIONS
    plain = compiler.load_module("// a")
    assert compiler.load_module("// a") is plain and len(seen) == 1
    monkeypatch.setenv("KFUSE_NVRTC_OPTIONS", "-lineinfo '-DKF_NOTE=1 2'")
    assert compiler.options() == compiler.OPTIONS + ("-lineinfo", "-DKF_NOTE=1 2")
    other = compiler.load_module("// a")
    assert other is not plain
    assert seen[-1] == ("// a", compiler.OPTIONS + ("-lineinfo", "-DKF_NOTE=1 2"), "nvrtc")
