"""BLAS library variants (CPU only): the BLAS-1 "quad" variants (8 threads per subvector, 16-byte
accesses) and the transpose-reduce of the BLAS-2 ``rowsum_store``.

* structure of generated quad kernels (KernelSpec / KernelCall / build_kernel, as in test_codegen)
* PTX of quad kernels (nvcc -ptx): 16-byte vector loads and stores in both dtypes; PTX of the
  shfl gemv: S - 1 + log2(32 / S) shuffles and one atomic instruction per warp
* a NumPy mirror of ``rowsum_store`` (blas2.cu) that checks which lane ends up owning which row
"""
import re
import subprocess

import numpy as np
import pytest

from kfuse.ir.kernel import KernelCall, KernelSpec
from kfuse.codegen.kernel import build_kernel
from kfuse.codegen.module import PRELUDE, module_source
from kfuse.errors import FusionError
from kfuse.frontend import parse_script
from kfuse.library.loader import SHIPPED
from test_codegen import loop_body

BLAS1 = ["scal", "axpy", "axpby", "vadd", "dot"]


def function(lib, name, n_inputs=None):
    return next(f for f in lib.functions
                if f.name == name and (n_inputs is None or len(f.inputs) == n_inputs))


def single_call(lib, fn):
    """A one-call program of fn (all inputs as script inputs) and its call."""
    ins = ", ".join(p.name for p in fn.inputs)
    decl = "; ".join(f"{p.type} {p.name}" for p in fn.params)
    prog = parse_script(f"{decl}; input {ins}; out = {fn.name}({ins}); return out;", lib)
    return prog.calls[0]


def variant(fn, name):
    return next(v for v in fn.variants if v.name == name)


def quad_kernel(lib, name, ipb=32, kname=None):
    fn = function(lib, name)
    call = single_call(lib, fn)
    spec = KernelSpec(kname or f"k_{name}_quad", (KernelCall(call, variant(fn, "quad")),), ipb=ipb,
                      stores=frozenset({call.outputs[0].id}))
    return build_kernel(spec, lib)


# ------------------------------------------------------------------------------------------
# BLAS-1 quad variants: metadata and generated structure
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BLAS1)
def test_quad_variant_metadata(lib, name):
    fn = function(lib, name)
    assert [v.name for v in fn.variants] == ["warp", "quad", "strip"]     # warp stays the default (variant 0)
    warp, quad, _ = fn.variants
    assert warp.threads == (32, 1) and quad.threads == (8, 1)
    assert quad.instances_per_block == (4, 8, 16, 32, 64, 128)
    assert all(8 * n % 32 == 0 and 8 * n <= 1024 for n in quad.instances_per_block)
    fns = {r.name: r.fn for r in quad.routines}
    assert {fns[r] for r in fns if r.startswith("load_")} == {"quad_load"}
    assert fns["store_out"] == ("quad_dot_store" if name == "dot" else "quad_store")
    assert fns["compute"] == {r.name: r.fn for r in warp.routines}["compute"]   # shared compute
    for r in quad.routines:
        for a in r.elements:
            assert a.mapping == ("thread" if (name == "dot" and a.name == "out") else "quad")


@pytest.mark.parametrize("name", ["scal", "axpy", "axpby", "vadd"])
def test_quad_map_kernel_structure(lib, name):
    k = quad_kernel(lib, name, ipb=32)
    src = k.source
    assert "__launch_bounds__(256)" in src and k.launch.threads == 256
    assert "const int lt = threadIdx.x % 8;" in src and "const int inst = threadIdx.x / 8;" in src
    assert "const long long first_i = kf_b * iters * 32;" in src
    pre, loop, post = loop_body(src)
    loads = re.findall(r"quad_load\(rix, g_(\w+), e_(\w+)\);", loop)
    assert loads and all(g == e for g, e in loads)
    assert len(loads) == {"scal": 1}.get(name, 2)
    assert f"{name}_compute(rix, " in loop
    assert "quad_store(rix, e_out, g_out);" in loop
    assert "blas1_load" not in src and "blas1_store" not in src
    assert "__syncthreads" not in src and not k.placement.shared
    assert set(k.placement.registers.values()) == {4}           # 4 entries per thread, in registers
    assert "KfReg<4> e_out;" in src


def test_quad_dot_kernel_structure(lib):
    k = quad_kernel(lib, "dot", ipb=32)
    pre, loop, post = loop_body(k.source)
    assert "__launch_bounds__(256)" in k.source
    assert "e_out.v[k] = real(0)" in pre                        # per-thread partial, cleared first
    assert "quad_load(rix, g_x, e_x);" in loop and "quad_load(rix, g_y, e_y);" in loop
    assert "dot_compute(rix, e_x, e_y, e_out);" in loop
    # the post-loop store runs in every lane (full-mask shuffles inside quad_dot_store)
    assert "quad_dot_store(rix, e_out, g_out);" in post and "act_u0" not in post
    assert "quad_dot_store" not in loop
    assert k.placement.registers == {"x": 4, "y": 4, "out": 1}
    assert [v.name for v, _ in k.launch.clears] == ["out"]


@pytest.mark.parametrize("ipb,threads", [(4, 32), (8, 64), (16, 128), (32, 256), (64, 512), (128, 1024)])
def test_quad_block_sizes(lib, ipb, threads):
    k = quad_kernel(lib, "axpy", ipb=ipb)
    assert f"__launch_bounds__({threads})" in k.source and k.launch.threads == threads


def test_quad_partial_warp_refused(lib):
    with pytest.raises(FusionError, match="not whole warps"):
        quad_kernel(lib, "axpy", ipb=2)


def test_quad_calls_fuse_in_registers(lib):
    """axpy/quad feeding dot/quad: z stays in registers under the same mapping, no barrier."""
    prog = parse_script("vector v, w, u, z; scalar a, r; input a, v, w, u; z = axpy(a, v, w); r = dot(z, u); "
                        "return z, r;", lib)
    kcs = tuple(KernelCall(c, variant(c.function, "quad")) for c in prog.calls)
    k = build_kernel(KernelSpec("k_fused", kcs, ipb=32,
                                stores=frozenset(c.outputs[0].id for c in prog.calls)), lib)
    pre, loop, post = loop_body(k.source)
    assert "quad_load(rix, g_z" not in loop                     # produced on chip: not reloaded
    assert "dot_compute(rix, e_z, e_u, e_r);" in loop and "quad_store(rix, e_z, g_z);" in loop
    assert "__syncthreads" not in k.source and not k.placement.shared
    assert k.placement.registers["z"] == 4


def test_fused_unrolled_quad_kernel_compiles(nvcc, tmp_path, lib):
    """axpy/quad + dot/quad, two serial iterations' loads issued together, both dtypes."""
    prog = parse_script("vector v, w, u, z; scalar a, r; input a, v, w, u; z = axpy(a, v, w); r = dot(z, u); "
                        "return z, r;", lib)
    kcs = tuple(KernelCall(c, variant(c.function, "quad")) for c in prog.calls)
    spec = KernelSpec("k_fused_u2", kcs, ipb=32, unroll=2, stores=frozenset(c.outputs[0].id for c in prog.calls))
    k = build_kernel(spec, lib)
    pre, loop, post = loop_body(k.source)
    assert loop.index("quad_load(rix, g_v, e_v_u1)") < loop.index("axpy_compute(rix, e_v_u0")
    assert "quad_dot_store(rix, e_r, g_r);" in post
    for dtype, vec in (("float32", "v4.f32"), ("float64", "v2.f64")):
        body = ptx_of(nvcc, tmp_path, [k], lib, dtype)["k_fused_u2"]
        ops = gmem_ops(body)
        packs = 1 if dtype == "float32" else 2
        assert ops.get(f"ld.{vec}", 0) >= 3 * 2 * packs and ops.get(f"st.{vec}", 0) >= 2 * packs, ops
        assert "__local_depot" not in body


def test_quad_routines_compile_with_shared_views(nvcc, tmp_path, lib):
    """A quad producer feeding a warp consumer puts z in shared memory: the routines then get
    shared views (whose slots they loop over) instead of KfReg; both dtypes compile."""
    prog = parse_script("vector v, w, u, z; scalar a, r; input a, v, w, u; z = axpy(a, v, w); r = dot(z, u); "
                        "return z, r;", lib)
    kcs = (KernelCall(prog.calls[0], variant(prog.calls[0].function, "quad")),
           KernelCall(prog.calls[1], variant(prog.calls[1].function, "warp")))
    k = build_kernel(KernelSpec("k_mixed", kcs, ipb=8,                # refusing it is a regression
                                stores=frozenset(c.outputs[0].id for c in prog.calls)), lib)
    assert "z" in k.placement.shared
    assert "KfSh_subvector32_quad_8x1" in "\n".join(k.views)
    for dtype in ("float32", "float64"):
        ptx_of(nvcc, tmp_path, [k], lib, dtype)


def test_compute_routines_loop_over_view_slots():
    """The shared compute routines serve "lane" (1 slot) and "quad" (4 slots) alike."""
    src = (SHIPPED / "blas1.cu").read_text()
    for name in ("scal", "axpy", "axpby", "vadd", "dot"):
        body = re.search(rf"KF_DEVICE void {name}_compute\(.*?\n\}}", src, re.S).group(0)
        assert re.search(r"k < V\w+::slots", body), name
        assert "KF_SUB / 32" not in body, name


def test_examples_prefer_quad_variants():
    """Measured on the H100: the 16-byte variants win, and the model's tie-break prefers them."""
    import kfuse
    from conftest import ROOT
    for path in ("axpydot", "sscal", "vadd", "waxpby"):
        prog = kfuse.compile(ROOT / "examples" / f"{path}.kf", tuned=False)
        assert {kc.variant.name for spec in prog.plan.kernels for kc in spec.calls} == {"quad"}
        assert "quad_load(" in "\n".join(k.source for k in prog.kernels)


# ------------------------------------------------------------------------------------------
# PTX: 16-byte accesses, shuffle and atomic counts (nvcc; fails, not skips, without it)
# ------------------------------------------------------------------------------------------

def ptx_of(nvcc, tmp_path, kernels, lib, dtype):
    cu = tmp_path / f"m_{dtype}.cu"
    cu.write_text(module_source(kernels, lib, dtype))
    out = tmp_path / f"m_{dtype}.ptx"
    proc = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-std=c++17", "-Werror", "all-warnings",
                           "-o", str(out), str(cu)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ptx = out.read_text()
    entries = {}
    for m in re.finditer(r"\.entry (\w+)\(", ptx):
        end = ptx.index("\n}\n", m.end())
        entries[m.group(1)] = ptx[m.start():end]
    return entries


def gmem_ops(body):
    """Counts of global loads/stores by vector width ('v4.f32', 'f32', ...), cache hints dropped."""
    ops = {}
    for op, width in re.findall(r"\b(ld|st)\.global(?:\.nc)?(?:\.\w+)*?\.((?:v[24]\.)?[fbu]\d+)\b", body):
        ops[f"{op}.{width}"] = ops.get(f"{op}.{width}", 0) + 1
    return ops


@pytest.mark.parametrize("dtype,vec,packs", [("float32", "v4.f32", 1), ("float64", "v2.f64", 2)])
def test_quad_kernels_use_16_byte_accesses(nvcc, tmp_path, lib, dtype, vec, packs):
    kernels = [quad_kernel(lib, name, ipb=32) for name in BLAS1]
    entries = ptx_of(nvcc, tmp_path, kernels, lib, dtype)
    n_in = {"scal": 1, "axpy": 2, "axpby": 2, "vadd": 2, "dot": 2}
    scalar = vec.split(".")[1]
    for name in BLAS1:
        body = entries[f"k_{name}_quad"]
        ops = gmem_ops(body)
        assert ".maxntid 256" in body
        assert "__local_depot" not in body and ".local" not in body, name
        # the aligned path: one (float) or two (double) 16-byte accesses per quad, per input
        assert ops.get(f"ld.{vec}", 0) >= packs * n_in[name], (name, ops)
        # the fallback: 4 bounds-checked entries per input
        assert ops.get(f"ld.{scalar}", 0) >= 4 * n_in[name], (name, ops)
        if name != "dot":
            # double: also the lane pairs' whole-sector stores (kf_store16_paired: 2 more, after
            # the activemask and the shuffles of address, flag and 2 entries, each 2 x 32 bits)
            paired = 2 if dtype == "float64" else 0
            assert ops.get(f"st.{vec}", 0) == packs + paired, (name, ops)
            assert ops.get(f"st.{scalar}", 0) == 4, (name, ops)
            assert body.count("activemask.b32") == (1 if paired else 0), name
            assert body.count("shfl.sync.bfly") == (7 if paired else 0), name
        else:
            assert body.count("shfl.sync.bfly") == 5 * (2 if dtype == "float64" else 1)   # a full warp sum
            assert len(re.findall(r"\b(?:atom|red)\.global", body)) == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rowsum_store_shuffle_and_atomic_counts(nvcc, tmp_path, lib, dtype):
    """The shipped BY values (4, 8, 16) and the others a tile admits (1, 2, 32)."""
    BYS = (1, 2, 4, 8, 16, 32)
    fn = function(lib, "gemv", 2)
    call = single_call(lib, fn)
    kernels = []
    for by in BYS:
        spec = KernelSpec(f"k_gemv_{by}", (KernelCall(call, variant(fn, "shfl"), (("BY", by),)),),
                          stores=frozenset({call.outputs[0].id}), loop="i")   # store every iteration
        kernels.append(build_kernel(spec, lib))
    entries = ptx_of(nvcc, tmp_path, kernels, lib, dtype)
    for by in BYS:
        body = entries[f"k_gemv_{by}"]
        S = 32 // by
        shuffles = S - 1 + int(np.log2(32 // S))                # instead of 5 S
        assert body.count("shfl.sync.bfly") == shuffles * (2 if dtype == "float64" else 1), by
        assert len(re.findall(r"\b(?:atom|red)\.global", body)) == 1, by
        assert "__local_depot" not in body and ".local" not in body, by   # w[] stays in registers


# ------------------------------------------------------------------------------------------
# rowsum_store: a NumPy mirror of the transpose-reduce in blas2.cu
# ------------------------------------------------------------------------------------------

def shfl_xor(x, o):
    """__shfl_xor_sync(0xffffffff, x, o) for all 32 lanes at once (x: lane-major array)."""
    return x[np.arange(32) ^ o]


def rowsum_store_mirror(v, BY):
    """Line for line the CUDA rowsum_store<BY> for one warp (lane = tx).

    v: (32, S, ...) the lanes' slot values.  Returns the atomics it issues, as
    {lane: (slot k, value)} for the lanes that call g.add (row ty + BY k), and the shuffle count.
    """
    KF_TR = 32
    S = KF_TR // BY                               # slots (rows) per lane
    assert 1 <= S <= 32 and S & (S - 1) == 0
    G = 32 // S                                   # lanes that end up sharing one slot
    lane = np.arange(32)
    w = [v[:, k].copy() for k in range(S)]        # real w[S]; w[k] = v(k)
    shuffles = 0
    step = 0
    while (S >> step) > 1:                        # for (int step = 0; (S >> step) > 1; ++step)
        h, o = S >> (step + 1), 16 >> step        # h = S/2, S/4, ..., 1; o = 16, 8, ...
        up = (lane & o) != 0                      # keep the upper half w[h .. 2h-1]
        up = up.reshape((32,) + (1,) * (v.ndim - 2))
        for k in range(S // 2):
            if k < h:
                keep = np.where(up, w[k + h], w[k])
                send = np.where(up, w[k], w[k + h])
                w[k] = keep + shfl_xor(send, o)   # the partner's send is computed before any write
                shuffles += 1
        step += 1
    s = w[0]                                      # kf_lanes_sum<G>(w[0]): xor G/2 .. 1
    o = G // 2
    while o > 0:
        s = s + shfl_xor(s, o)
        shuffles += 1
        o >>= 1
    adds = {L: (L // G, s[L]) for L in range(32) if L % G == 0}   # if (lane % G == 0) add row ty + BY (lane / G)
    return adds, shuffles


@pytest.mark.parametrize("BY", [32, 16, 8, 4, 2, 1])
def test_rowsum_transpose_reduce_lane_ownership(BY):
    S = 32 // BY
    G = 32 // S
    # one-hot contributions: v[L, k] is the unit vector of (lane L, slot k), so each final value
    # says exactly which partials it summed (each must appear once)
    v = np.zeros((32, S, 32 * S), dtype=np.int64)
    for L in range(32):
        for k in range(S):
            v[L, k, L * S + k] = 1
    adds, shuffles = rowsum_store_mirror(v, BY)
    assert shuffles == S - 1 + int(np.log2(G))
    assert sorted(adds) == [G * k for k in range(S)]            # S lanes active, lane G k ...
    rows = []
    for L, (k, total) in adds.items():
        assert k == L // BY                                      # ... owns slot k = lane / BY (KF_TR = 32)
        want = np.zeros(32 * S, dtype=np.int64)
        want[np.arange(32) * S + k] = 1                          # slot k of every lane, once each
        np.testing.assert_array_equal(total, want)
        rows.append(BY * k)                                      # row offset ty + BY k == ty + L
        assert BY * k == L
    assert sorted(rows) == [BY * k for k in range(S)]           # every row once


@pytest.mark.parametrize("BY", [32, 16, 8, 4, 2, 1])
def test_rowsum_transpose_reduce_random_values(BY):
    rng = np.random.default_rng(BY)
    S = 32 // BY
    v = rng.standard_normal((32, S))
    adds, _ = rowsum_store_mirror(v, BY)
    got = np.full(S, np.nan)
    for L, (k, total) in adds.items():
        got[k] = total
    np.testing.assert_allclose(got, v.sum(axis=0), rtol=1e-12, atol=1e-12)


def test_rowsum_mirror_matches_cuda_source():
    """The mirror above follows these lines of blas2.cu; change both together."""
    src = (SHIPPED / "blas2.cu").read_text()
    body = re.search(r"KF_DEVICE void rowsum_store\(.*?\n\}", src, re.S).group(0)
    compact = " ".join(body.split())
    for line in ("constexpr int S = KF_TR / BY;",
                 "constexpr int G = 32 / S;",
                 "const int lane = ix.tx;",
                 "for (int k = 0; k < S; ++k) w[k] = v(k);",
                 "for (int step = 0; (S >> step) > 1; ++step) {",
                 "const int h = S >> (step + 1), o = 16 >> step;",
                 "const bool up = (lane & o) != 0;",
                 "for (int k = 0; k < S / 2; ++k) { if (k < h) {",
                 "const real keep = up ? w[k + h] : w[k];",
                 "const real send = up ? w[k] : w[k + h];",
                 "w[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);",
                 "const real s = kf_lanes_sum<G>(w[0]);",
                 "if (lane % G == 0) g.add(ix.i * KF_TR + ix.ty + BY * (lane / G), s);"):
        assert line in compact, line
    assert "kf_warp_sum" not in body


def test_lanes_sum_helper_groups():
    """kf_lanes_sum<W> (prelude) sums aligned groups of W lanes with xor W/2 .. 1."""
    prelude = " ".join(PRELUDE.read_text().split())
    assert "for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);" in prelude
    x = np.arange(32, dtype=np.int64) ** 2
    for W in (1, 2, 4, 8, 16, 32):
        s, o = x.copy(), W // 2
        while o > 0:
            s = s + shfl_xor(s, o)
            o >>= 1
        want = np.repeat(x.reshape(32 // W, W).sum(axis=1), W)
        np.testing.assert_array_equal(s, want)
