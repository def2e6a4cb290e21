"""The compiled barrier check (issue 60, finding 17): routines that hide a block-wide barrier from
the loader's text scan are refused from their PTX; routines without one (``__syncwarp`` allowed)
and every shipped routine pass.  CPU, through ``nvcc -ptx`` (fails, not skips, without nvcc:
the ``nvcc`` fixture); the hostile routines are compiled together, in one nvcc run."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

import kfuse
from kfuse.codegen import barrier_check as bc
from kfuse.codegen import ptx
from kfuse.errors import CompileError, LibraryError
from kfuse.library.loader import load_library
from kfuse.runtime import compiler

from test_library import SOURCE, make_library, scal_function

# name -> (lines before the routine, its body, the PTX instruction found; None: passes).  Each hides
# its barrier from the text scan (library/cusource.py), as the audit did.
ROUTINES = {
    "literals": ("", 'asm volatile("bar" ".sync 0;");', "bar.sync"),
    "octal": ("", r'asm volatile("\142ar.sync 0;");', "bar.sync"),
    "splice": ("", "__sync\\\nthreads();", "bar.sync"),
    "digraph": ("#define KF_PASTE(a, b) a %:%: b\n", "KF_PASTE(__sync, threads)();", "bar.sync"),
    "stringify": ("#define KF_STR(x) #x\n", "asm volatile(KF_STR(ba) KF_STR(r.sync 0;));", "bar.sync"),
    "raw": ("", 'const char* q = R"x(")x" "/*"; asm volatile("bar.sync 0;"); const char* r = "*/"; (void)q; (void)r;',
            "bar.sync"),
    "mbarrier": ("", '__shared__ unsigned long long m; asm volatile("mbarrier.init.shared.b64 [%0], 32;" :: '
                 '"r"((unsigned)__cvta_generic_to_shared(&m)));', "mbarrier.init.shared.b64"),
    "cudabarrier": ("#include <cuda/barrier>\n", "__shared__ cuda::barrier<cuda::thread_scope_block> b; "
                    "if (ix.tx == 0) init(&b, 32); b.arrive_and_wait();", "mbarrier."),
    "noinline": ("__device__ __noinline__ void kf_helper_sync() { __sync\\\nthreads(); }\n", "kf_helper_sync();",
                 "bar.sync"),
    # pass here, refused in a module that opens otherwise (test_a_barrier_only_where_a_module_opens_...)
    "persistent": ("", "\n#ifdef __restrict__\n__sync\\\nthreads();\n#endif\n", None),
    "sparse": ("", "\n#ifdef KF_LONG_THREADS\n__sync\\\nthreads();\n#endif\n", None),
    "syncwarp": ("", "__syncwarp(); a1(0) = a2 * a0(0);", None),
    "plain": ("", "a1(0) = a2 * a0(0);", None),
}
HOSTILE = [name for name, (_, _, found) in ROUTINES.items() if found]


def _function(name: str) -> dict:
    f = scal_function()
    f["name"], f["aliases"] = f"f_{name}", []
    f["variant"][0]["routines"][1]["fn"] = f"{name}_compute"
    return f


def _script(name: str) -> str:
    return f"vector x, y;\ninput x;\ny = f_{name}(2, x);\nreturn y;\n"


def _source(routines: dict) -> str:
    # element arguments by reference, as the shipped routines take them (a register view passed by
    # value is a copy: what the routine writes to it is lost, and the loader refuses a written one)
    text = ("template <class T0, class T1>\n"
            "KF_DEVICE void blas1_load(const KfIx& ix, T0&& g, T1&& e) { e(0) = g.get(ix.i * KF_SUB + ix.tx, real(0)); }\n"
            "template <class T0, class T1>\n"
            "KF_DEVICE void blas1_store(const KfIx& ix, T0&& e, T1&& g) { g.put(ix.i * KF_SUB + ix.tx, e(0)); }\n")
    for name, (head, body, _) in routines.items():
        text += (f"{head}template <class T0, class T1, class T2>\n"
                 f"KF_DEVICE void {name}_compute(const KfIx& ix, T0&& a0, T1&& a1, T2&& a2) {{ {body} }}\n")
    return text


@pytest.fixture(autouse=True)
def _nvcc_path(monkeypatch):
    """The check's compiler is nvcc, as on a CPU machine with the toolkit (where CuPy is installed
    too, NVRTC would be taken); the tests that compile ask for the ``nvcc`` fixture."""
    monkeypatch.setattr(bc, "available", bc.nvcc_compiler)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, nvcc):
    """A library of one function per routine of ``ROUTINES``, every unit checked in one nvcc run
    (the verdicts are kept: the tests below find them without compiling again)."""
    folder = make_library(tmp_path_factory.mktemp("hostile") / "lib", [_function(n) for n in ROUTINES])
    (folder / SOURCE).write_text(_source(ROUTINES))
    lib = load_library(folder)              # the text scan passes every one of them
    comp = bc.nvcc_compiler()
    assert comp is not None
    units = bc.library_units(lib, "float32")
    t0 = time.perf_counter()
    with pytest.raises(LibraryError):
        bc.run(units, comp)
    return SimpleNamespace(folder=folder, lib=lib, units=units, comp=comp, seconds=time.perf_counter() - t0)


@pytest.mark.parametrize("name", HOSTILE)
def test_a_barrier_hidden_from_the_text_scan_is_refused(hostile, name):
    """Adjacent literals, an octal escape, a line splice, digraph token pasting, stringification,
    a raw string, an mbarrier, cuda::barrier, a helper that is not inlined: each a LibraryError
    naming the routine, its file and the PTX instruction, when the script's module is made."""
    with pytest.raises(LibraryError) as info:
        kfuse.compile(_script(name), library=[hostile.folder], fuse=False).cuda_source
    err = info.value
    assert err.file.endswith("fn.toml") and err.field == f"function f_{name}.variant.warp.routine.compute.fn"
    assert f"{name}_compute (fn.cu;" in str(err) and "must not synchronise" in str(err)
    assert f"block-wide barrier instruction '{ROUTINES[name][2]}" in str(err)


@pytest.mark.parametrize("name", ["syncwarp", "plain"])
def test_routines_without_a_block_barrier_pass(hostile, name):
    """__syncwarp() is bar.warp.sync, a warp's own barrier (warp-wide routines are allowed)."""
    src = kfuse.compile(_script(name), library=[hostile.folder], fuse=False).cuda_source
    assert f"{name}_compute" in src
    assert hostile.seconds < 30      # one nvcc run for all the routines (a hang, not a speed)


def test_a_barrier_only_where_a_module_opens_otherwise_is_refused(hostile):
    """A routine file may test what precedes it: a persistent kernel's module defines __restrict__
    away, a module reading a csr matrix holds the sparse prelude first.  Each routine is checked
    as the module that holds it opens (``module_source`` says which)."""
    for name, env in (("persistent", {"persistent": True}), ("sparse", {"sparse": True})):
        fn = next(f for f in hostile.lib.functions if f.name == f"f_{name}")
        var = fn.variants[0]
        u = bc.unit(hostile.lib, "float32", fn, var, var.routine("compute"), (), **env)
        with pytest.raises(LibraryError) as info:
            bc.run([u], hostile.comp)
        assert "'bar.sync'" in str(info.value) and f"{name}_compute" in str(info.value)


def test_block_order_defines_come_after_the_routine_files():
    """The runtime's ``#define KF_ORDER_<kernel>`` lines (a module built for block orders) go
    after the library's files, just before the kernels: no routine file sees them."""
    from kfuse.runtime.order import with_orders
    src = kfuse.compile("vector x, y;\ninput x;\ny = scal(2, x);\nreturn y;\n", fuse=False).cuda_source
    define = "#define KF_ORDER_k0 1\n"
    built = with_orders(src, define)
    assert built.replace(define, "") == src
    assert built.index("library routines used by the kernels") < built.index(define)
    assert built.split(define)[1].split("\n", 1)[0].endswith('"kfuse-generated.cu"')
    assert with_orders("// no kernels of kfuse's\n", define) == define + "// no kernels of kfuse's\n"


def test_an_included_file_is_not_read(tmp_path, nvcc):
    """``#include "file"`` beside the library: the module holds the routine file's text, and the
    check finds no file beside it (neither does CuPy's compile): a routine that does not build
    alone is refused."""
    folder = make_library(tmp_path / "lib", [_function("inc")])
    (folder / "kf_sync.cuh").write_text("#define KF_SYNC() __syncthreads()\n")
    (folder / SOURCE).write_text('#include "kf_sync.cuh"\n' + _source({"inc": ("", "KF_SYNC();", None)}))
    load_library(folder)
    with pytest.raises(LibraryError) as info:
        kfuse.compile(_script("inc"), library=[folder], fuse=False).cuda_source
    assert info.value.field.startswith("function f_inc.variant.warp.routine.")    # the file's first routine
    assert "does not compile on its own" in str(info.value) and "kf_sync.cuh" in str(info.value)


def test_without_a_compiler_the_runtime_checks_before_compiling(hostile, monkeypatch):
    """No CuPy and no nvcc when the module is made: its text comes back, and load_module (where
    NVRTC always is: played by nvcc here) checks the routines before compiling anything."""
    monkeypatch.setattr(bc, "available", lambda: None)
    for name, value in (("_required", []), ("_done", {}), ("_passed", set()), ("_failed", {})):
        monkeypatch.setattr(bc, name, value)
    monkeypatch.setattr(bc, "nvrtc_compiler", bc.nvcc_compiler)
    monkeypatch.setattr(compiler, "_before", [])
    monkeypatch.setattr(compiler, "_modules", {})
    made = []

    class RawModule:
        def __init__(self, code, options, backend):
            made.append(code)

        def compile(self):
            pass

    cp = SimpleNamespace(RawModule=RawModule, cuda=SimpleNamespace(Device=lambda: SimpleNamespace(id=0)))
    monkeypatch.setattr(compiler, "cupy", lambda: cp)
    good = kfuse.compile(_script("plain"), library=[hostile.folder], fuse=False).cuda_source
    bad = kfuse.compile(_script("literals"), library=[hostile.folder], fuse=False).cuda_source
    assert "literals_compute" in bad and not bc._passed       # nothing checked yet
    with pytest.raises(LibraryError) as info:
        compiler.load_module(good)      # the process has made a module of the hostile routine
    assert "'bar.sync'" in str(info.value) and made == []


def test_passes_are_kept_on_disk_and_read_back_checked(hostile, tmp_path, monkeypatch):
    """A unit passed is a file named by its key holding exactly PASSED and the key; another
    process (a fresh memory) takes it without compiling; a file saying anything else is ignored."""
    monkeypatch.setenv("KFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(bc, "_passed", set())
    units = [u for u in hostile.units if u.function.name == "f_plain"]
    bc.run(units, hostile.comp)
    keys = [bc._key(u, hostile.comp) for u in units]
    files = [tmp_path / "cache" / "barrier-check" / k for k in keys]
    assert all(f.read_bytes() == b"PASSED " + k.encode() + b"\n" for f, k in zip(files, keys))

    def refuse(source, options):
        raise CompileError("compiled again")
    offline = bc.Compiler(hostile.comp.name, hostile.comp.ident, hostile.comp.options, refuse)
    monkeypatch.setattr(bc, "_passed", set())
    bc.run(units, offline)                       # from the files: no compile
    files[0].write_bytes(b"PASSED " + keys[1].encode() + b"\n")
    monkeypatch.setattr(bc, "_passed", set())
    with pytest.raises(LibraryError) as info:
        bc.run(units, offline)
    assert "compiled again" in str(info.value)


def test_every_shipped_routine_passes(lib, nvcc):
    """The shipped library is trusted at run time (never compiled for the check); here every
    routine of every variant is checked, with its macros' first values, float32 and float64
    (one nvcc run each, side by side).  (Every value of every macro: 2,821 units a type, about
    100 s of nvcc each on 2 cores, all passing when this check was written.)"""
    comp = bc.nvcc_compiler()
    assert comp is not None
    units = {dtype: [u for fn in lib.functions for var in fn.variants for r in var.routines
                     if (u := bc.unit(lib, dtype, fn, var, r, tuple((k, v[0]) for k, v in var.macros.items())))]
             for dtype in ("float32", "float64")}
    assert len(units["float32"]) > 200
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda us: bc.run(us, comp), units.values()))


def test_kfuse_own_routines_are_never_compiled_at_run_time(lib, monkeypatch):
    """The shipped library's routines and those of the functions synthesized from elementwise
    expressions are kfuse's: a module of them asks for no check (no compiler run, no cost)."""
    assert all(bc.trusted(fn, var) for fn in lib.functions for var in fn.variants)
    asked = []
    monkeypatch.setattr(bc, "check", lambda units: asked.append(list(units)))
    src = kfuse.compile("vector x, y, z; input x, y; z = x * y + exp(x) - 0.25; return z;").cuda_source
    assert "exp" in src and asked and all(units == [] for units in asked)


# -- the PTX reader (no compiler) -------------------------------------------------------------
PTX = """
.version 9.0
.target sm_90
.global .align 4 .b8 table[4] = {1, 2, 3, 4};
.func _Z4syncv()
{
\tbar.sync \t0;   // bar.sync in a comment is no instruction
\tret;
}
.func (.param .b32 func_retval0) _Z4idlei(.param .b32 p)
{
\t/* barrier.sync 0; */ membar.gl;
\tret;
}
.visible .entry warp(.param .u64 a)
{
\tbar.warp.sync \t-1;
\t{ // callseq 0, 0
\tcall.uni (retval0),
\t_Z4idlei,
\t(param0);
\t}
\tret;
}
.visible .entry direct(.param .u64 a)
.maxntid 256, 1, 1
{
\t@%p1 bra $L__BB1_2;
\tcall.uni
\t_Z4syncv,
\t(
\t);
$L__BB1_2:
\tret;
}
.visible .entry pointer(.param .u64 a)
{
\tcall (retval0), %rd4, (param0), prototype_0;
\tret;
}
.visible .entry own(.param .u64 a)
{
\t@!%p2 mbarrier.try_wait.shared.b64 %p1, [%r1], %rd2;
}
"""


def test_ptx_reader():
    """Barriers reached through direct and indirect calls, predicates and labels; bar.warp.sync,
    membar and comments are none; a barrier in a kernel nobody named is reported apart."""
    assert ptx.block_barrier("bar.sync") and ptx.block_barrier("barrier.cluster.arrive.release.aligned")
    assert ptx.block_barrier("cp.async.mbarrier.arrive.b64") and ptx.block_barrier("bar.red.popc.u32")
    assert not ptx.block_barrier("bar.warp.sync") and not ptx.block_barrier("membar.gl")
    found, elsewhere = ptx.reached(PTX, ["warp", "direct", "pointer"])
    assert found == {"direct": "bar.sync", "pointer": "bar.sync"}
    assert elsewhere == ["mbarrier.try_wait.shared.b64"]
    assert ptx.reached(PTX, ["warp"], frozenset({"own"})) == ({}, ["bar.sync"])
    assert ptx.reached(PTX, ["warp", "direct", "own"]) == (
        {"direct": "bar.sync", "own": "mbarrier.try_wait.shared.b64"}, [])
