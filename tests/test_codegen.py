"""Structure of the generated kernels (no GPU, no nvcc)."""
import re

import pytest

import kfuse
from kfuse.ir.kernel import KernelCall, KernelSpec
from kfuse.codegen.kernel import build_kernel
from kfuse.errors import FusionError
from kfuse.frontend import parse_script

from conftest import EXAMPLES, ROOT


def compiled(name, dtype="float32"):
    return kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype, fuse=False)


def loop_body(src):
    """(before the serial loop, inside it, after it) of a kernel's source."""
    head, rest = re.split(r"for \(int it = 0; it < iters; it \+= \d+\) \{", src, maxsplit=1)
    depth, i = 1, 0
    while depth:
        depth += {"{": 1, "}": -1}.get(rest[i], 0)
        i += 1
    return head, rest[:i - 1], rest[i:]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_unfused_plan_has_one_kernel_per_call(path):
    prog = kfuse.compile(path, fuse=False)
    assert len(prog.kernels) == len(prog.program.calls)
    assert prog.cuda_source.count('extern "C" __global__ void __launch_bounds__') == len(prog.program.calls)
    for k in prog.kernels:
        assert f"// kernel {k.launch.kernel}:" in k.source


def test_gemv_structure():
    k = compiled("bicgk").kernels[0]
    assert k.spec.loop == "j"                                # the unfused plan walks the reduced axis
    pre, loop, post = loop_body(k.source)
    assert "e_q.v[k] = real(0)" in pre                       # out does not follow j: accumulated
    assert "colvec_load<8>(rix, g_p, e_p);" in loop          # x follows j: loaded every iteration
    assert "tile_load<8>(rix, g_A, e_A);" in loop
    assert loop.index("tile_load") < loop.index("gemv_compute<8>")
    assert "rowsum_store<8>(rix, e_q, g_q);" in post and "rowsum_store" not in loop
    assert "__syncthreads" not in k.source                   # everything in registers
    assert set(k.placement.registers) == {"A", "p", "q"} and not k.placement.shared
    assert [v.name for v, _ in k.launch.clears] == ["q"]


def test_gemv_walking_i_stores_every_iteration(lib):
    from dataclasses import replace
    spec = replace(compiled("bicgk").plan.kernels[0], loop="i")
    k = build_kernel(spec, lib)
    pre, loop, post = loop_body(k.source)
    assert "colvec_load<8>(rix, g_p, e_p);" in pre           # x does not follow i: invariant
    assert "e_q.v[k] = real(0)" in loop and "rowsum_store<8>(rix, e_q, g_q);" in loop
    assert loop.index("e_q.v[k] = real(0)") < loop.index("gemv_compute<8>")


def test_unrolled_loop_issues_loads_first(lib):
    from dataclasses import replace
    spec = replace(compiled("bicgk").plan.kernels[0], unroll=2)
    k = build_kernel(spec, lib)
    pre, loop, post = loop_body(k.source)
    order = [loop.index(x) for x in ("tile_load<8>(rix, g_A, e_A_u0)", "tile_load<8>(rix, g_A, e_A_u1)",
                                     "gemv_compute<8>(rix, e_A_u0, e_p_u0, e_q)",
                                     "gemv_compute<8>(rix, e_A_u1, e_p_u1, e_q)")]
    assert order == sorted(order)
    assert "const bool act_u1 = it + 1 < iters && ix_u1.j < n_j;" in loop
    assert "KfReg<4> e_q;" in k.source                       # the accumulator is shared by the copies


def test_unroll_refused_with_shared_memory(lib):
    from dataclasses import replace
    k = smem_gemv(lib)
    with pytest.raises(FusionError, match="unrolled serial iterations need every element in registers"):
        build_kernel(replace(k.spec, unroll=2), lib)


def test_gemtv_accumulates_across_the_loop():
    k = compiled("bicgk").kernels[1]
    pre, loop, post = loop_body(k.source)
    assert "e_s.v[k] = real(0)" in pre                       # out follows j only: accumulated
    assert "gemtv_compute<8>(rix, e_A, e_r, e_s);" in loop
    assert "colsum_store<8>(rix, e_s, g_s);" in post and "colsum_store" not in loop


def test_dot_partial_in_registers_and_stored_after_loop():
    k = compiled("axpydot").kernels[1]
    pre, loop, post = loop_body(k.source)
    assert "e_r.v[k] = real(0)" in pre and "dot_store(rix, e_r, g_r);" in post
    assert "if (act_u0) {" in loop                          # unnested: idle instance slots skip work
    assert k.placement.registers == {"z": 1, "u": 1, "r": 1}


def test_scalar_arguments_literals_and_negation():
    src = compiled("axpydot").kernels[0].source
    assert "axpy_compute(rix, e_v, e_w, e_z, -s_a);" in src
    src = compiled("sgemvt").kernels[0].source
    assert "real(1.0)" in src


def test_readable_names_and_line_directives():
    src = compiled("gemver").cuda_source
    assert '#line 1 "blas/blas2.cu"' in src and '#line 1 "kfuse/prelude.cuh"' in src
    assert "// c0_ger: B1 = ger(A, u1, v1) -- load_A" in src
    assert "k3_gemv(" in src and "typedef float real;" in src
    assert "typedef double real;" in compiled("gemver", "float64").cuda_source


def smem_gemv(lib, by=4):
    prog = parse_script((ROOT / "examples" / "bicgk.kf").read_text(), lib, "bicgk.kf")
    call = prog.calls[0]
    variant = next(v for v in call.function.variants if v.name == "smem")
    spec = KernelSpec("k_smem", (KernelCall(call, variant, (("BY", by),)),),
                      stores=frozenset({call.outputs[0].id}))
    return build_kernel(spec, lib)


def test_shared_memory_variant_barriers_exactly_where_needed(lib):
    k = smem_gemv(lib)
    assert set(k.placement.shared) == {"A", "p", "c0_gemv_part"}
    assert set(k.placement.registers) == {"q"}
    barriers = [s.routine.name if s.routine else f"clear {s.element}" for s in k.steps if s.barrier]
    # A and p change mapping before the partial products; part before the finishing sum
    assert barriers == ["compute_partial", "compute_finish"]
    pre, loop, post = loop_body(k.source)
    assert loop.count("__syncthreads()") == 2 and "__syncthreads" not in pre
    assert "if (lt < 32) {" in loop                          # 32x1 routine: 3 warps idle
    assert "KfSh_tile32x32p33_any v_A" in loop                # padded tile, arbitrary indexing
    assert "__shared__ real kf_smem[" in k.source


def test_loop_back_edge_barrier(lib, tmp_path):
    # a routine writes a shared tile that the previous iteration read with another mapping
    (tmp_path / "library.toml").write_text('[library]\nname = "t"\n')
    (tmp_path / "f.cu").write_text(
        "template <class V> KF_DEVICE void ld(const KfIx& ix, const KfMat& g, V& a) {}\n"
        "template <class VA, class VO> KF_DEVICE void cp(const KfIx& ix, VA& a, VO& o) {}\n"
        "template <class V> KF_DEVICE void st(const KfIx& ix, V& o, const KfVec& g) {}\n")
    (tmp_path / "f.toml").write_text('''
[[function]]
name = "rowsums"
kind = "map-reduce"
params = [
  { name = "A", type = "matrix", dir = "in", index = ["i", "j"] },
  { name = "out", type = "vector", dir = "out", index = ["i"], reduce = "sum" },
]
[[function.variant]]
name = "v"
source = "f.cu"
threads = [32, 8]
routines = [
  { name = "load_A", fn = "ld", args = ["&A", "A:w:rows"] },
  { name = "compute", fn = "cp", args = ["A:r:any", "out:acc:split"] },
  { name = "store_out", fn = "st", args = ["out:r:split", "&out"] },
]
''')
    tlib = kfuse.load_library(tmp_path, shipped=False)
    prog = parse_script("matrix A; vector y; input A; y = rowsums(A); return y;", tlib)
    call = prog.calls[0]
    spec = KernelSpec("k", (KernelCall(call, call.function.variants[0]),),
                      stores=frozenset({call.outputs[0].id}))
    k = build_kernel(spec, tlib)
    flags = {s.routine.name: s.barrier for s in k.steps if s.routine}
    assert flags == {"load_A": True, "compute": True, "store_out": False}


def test_bad_macro_value_is_refused(lib):
    prog = parse_script((ROOT / "examples" / "bicgk.kf").read_text(), lib)
    call = prog.calls[0]
    spec = KernelSpec("k", (KernelCall(call, call.function.variants[0], (("BY", 3),)),))
    with pytest.raises(FusionError, match="not a multiple of 3"):
        build_kernel(spec, lib)


def test_mixed_nesting_refused(lib):
    prog = parse_script("matrix A; vector x, y, z; input A, x; y = gemv(A, x); z = scal(2, y); return z;", lib)
    kcs = tuple(KernelCall(c, c.function.variants[0], (("BY", 8),) if c.function.nesting == 2 else ())
                for c in prog.calls)
    with pytest.raises(FusionError, match="different nesting depth"):
        build_kernel(KernelSpec("k", kcs), lib)


def test_launch_grid_and_auto_iterations():
    k = compiled("bicgk").kernels[0]
    L = k.launch
    assert L.carried                                         # accumulators: blocks walk many instances
    dims = {0: 8192, 1: 8192}
    along, across = 256, -(-256 // L.span)                   # tiles along the loop, block groups across
    iters = L.iterations(dims, target_blocks=2112)
    assert iters == -(-along // max(1, 2112 // across)) and L.grid(dims, iters) == across * -(-along // iters)
    assert L.counts({0: 33, 1: 1}) == (2, 1)                 # partial edge tiles count
    v = compiled("sscal").kernels[0].launch
    assert not v.carried                                     # a pure map: one instance per slot
    assert v.grid({0: 1}, v.iterations({0: 1}, 2112)) == 1
    assert v.iterations({0: 2**26}, 2112) == 1 and v.grid({0: 2**26}, 1) == 2**21 // v.ipb


def test_64bit_offsets():
    src = compiled("madd").cuda_source
    assert "long long rows, cols" in src and "long long first_i" in src
    assert re.search(r"long long n_i", src)


# ---- spans: a block covers several instances across the loop axis ---------------------------
def fused_spec(name, variant, by, loop, span, unroll=1):
    """The spec fusing every call of an example, each call in the named variant."""
    prog = kfuse.compile(ROOT / "examples" / f"{name}.kf", tuned=False, calibration=False)
    calls = []
    for call in prog.program.calls:
        var = next(v for v in call.function.variants if v.name in variant)
        calls.append(KernelCall(call, var, tuple((m, by) for m in var.macros)))
    stores = frozenset(v.id for v in prog.program.outputs)
    return KernelSpec(f"k_{name}", tuple(calls), stores=stores, loop=loop, unroll=unroll, span=span)


def test_span_shares_vectors_along_the_loop_and_sums_partials_on_chip(lib):
    # BiCGK walking i with a span of 2 tile columns: A, p (along j) and s (along j) have a copy per
    # slot; r (along i) is loaded once for the span; q (along i) is summed over the slots on chip
    # and stored once per iteration
    k = build_kernel(fused_spec("bicgk", ("quad",), 4, "i", 2), lib)
    pre, loop, post = loop_body(k.source)
    assert "KfReg<32> e_A_v0;" in k.source and "KfReg<32> e_A_v1;" in k.source
    assert "KfReg<8> e_r;" in k.source and "e_r_v1" not in k.source
    assert "KfReg<8> e_q;" in k.source and "e_q_v1" not in k.source
    assert "const long long nb_j = (n_j + 1) / 2;" in k.source
    assert "const bool act_v1 = ix_v1.j < n_j;" in k.source
    assert loop.count("qtile_load<4>") == 2 and loop.count("rowvec_load<4>") == 1
    assert loop.count("qrowsum_store<4>(rix, e_q, g_q);") == 1 and "[once for the span]" in loop
    assert loop.index("gemv_qcompute<4>(rix, e_A_v1") < loop.index("qrowsum_store")
    assert post.count("qcolsum_store<4>") == 2                # s: one store per slot, after the loop
    steps = {(s.routine.name if s.routine else "clear", s.kc.call.name): s.once_per_span for s in k.steps}
    assert steps[("store_out", "c0_gemv")] and not steps[("store_out", "c1_gemtv")]


def test_span_halves_the_modelled_atomics(lib):
    from kfuse.cost.transfer import atomic_warps
    dims = {0: 8192, 1: 8192}
    one = build_kernel(fused_spec("bicgk", ("quad",), 4, "i", 1), lib)
    two = build_kernel(fused_spec("bicgk", ("quad",), 4, "i", 2), lib)
    assert atomic_warps(two, dims) * 2 == atomic_warps(one, dims) > 0
    assert two.launch.grid(dims, 8) * 2 == one.launch.grid(dims, 8)


def test_span_refusals(lib):
    with pytest.raises(FusionError, match="span of 2 instances across the loop needs every element in registers"):
        build_kernel(fused_spec("bicgk", ("smem",), 4, "j", 2), lib)
    # GESUMMV walking i: t (along i) would be shared by the slots, but y's call reads it as partial
    # sums inside the iteration, before every slot has added to it
    with pytest.raises(FusionError, match="reads t, which the span's instances share"):
        build_kernel(fused_spec("gesummv", ("quad",), 8, "i", 2), lib)
    with pytest.raises(FusionError, match="register entries per thread"):
        build_kernel(fused_spec("bicgk", ("shfl", "colsum"), 2, "j", 4, unroll=4), lib)
    with pytest.raises(FusionError, match="needs a nested kernel"):
        build_kernel(fused_spec("vadd", ("quad",), 8, "i", 2), lib)


def test_copies_built_together_equal_kernels_built_alone(lib):
    from dataclasses import replace
    from kfuse.codegen.kernel import build_copies
    copies = [(1, 1), (2, 1), (1, 2), (4, 2), (1, 4), (4, 4)]
    for name, variant, by, loop in (("bicgk", ("quad",), 4, "i"), ("bicgk", ("shfl", "smem"), 4, "j"),
                                    ("gemver", ("rows", "colsum", "shfl"), 8, "i")):
        base = fused_spec(name, variant, by, loop, 1)
        if name == "gemver":        # the first three calls: ger, ger, gemtv
            base = replace(base, calls=base.calls[:3])
        together = build_copies(base, lib, copies)
        for (unroll, span), got in zip(copies, together):
            try:
                alone = build_kernel(replace(base, unroll=unroll, span=span), lib)
            except FusionError:
                assert isinstance(got, FusionError), (name, unroll, span)
                continue
            assert not isinstance(got, FusionError), (name, unroll, span, got)
            assert got.source == alone.source and got.launch == alone.launch
            assert [s.once_per_span for s in got.steps] == [s.once_per_span for s in alone.steps]


@pytest.mark.parametrize("name, phase", [("bicgk", "loop"), ("gemver", "post"), ("sscal", None)])
def test_wait_for_the_clear_before_the_first_cleared_output(name, phase):
    """A kernel launched while the fill clearing its reduced outputs still runs waits for it
    (kf_wait_prior) once, at the start of the first phase that touches a cleared output: before
    the serial loop when the loop stores one (BiCGK's q), before the stores after the loop when
    only they do (GEMVER's x); a kernel with nothing cleared waits only at its end (a no-op
    unless it was launched early after fills for later kernels)."""
    prog = kfuse.compile(ROOT / "examples" / f"{name}.kf", tuned=False)
    k = prog.kernels[0]
    body = k.source
    assert bool(k.launch.clears) == (phase is not None)
    assert body.count("kf_wait_prior();") == 1
    assert k.launch.waits == (phase is not None)
    if phase is None:
        assert re.search(r"kf_wait_prior\(\);[^\n]*before leaving[^\n]*\n}", body)
    if phase == "loop":
        assert re.search(r"kf_wait_prior\(\);[^\n]*\n\s*// ---- serial loop", body)
    elif phase == "post":
        assert re.search(r"kf_wait_prior\(\);[^\n]*\n\s*// ---- after the serial loop", body)
        loop = body[body.index("// ---- serial loop"):body.index("kf_wait_prior();")]
        assert "g_x" not in loop                  # x is not touched before the wait
    assert 'extern "C" __global__ void kf_fill(' in prog.cuda_source
    assert all(kk.source.count("kf_allow_next();") == 1 for kk in prog.kernels)


@pytest.mark.parametrize("name", ["gemver", "atax", "sgemvt"])
def test_later_kernel_waits_before_reading_what_the_first_wrote(name):
    """The second kernel of a plan is launched while the first still runs (PDL): it waits once,
    at the start of the first phase that reads a value the first kernel wrote (B, t, or the
    first product), and touches none of them before."""
    # ATAX where its rows fit no block and no cluster (two kernels; at 8192 it runs in one pass)
    prog = kfuse.compile(ROOT / "examples" / f"{name}.kf", tuned=False, sizes={"n": 140000} if name == "atax" else None)
    k0, k1 = prog.kernels
    assert k1.launch.waits and k1.source.count("kf_wait_prior();") == 1
    written = {kc.call.bindings()[p.name].name for kc in k0.spec.calls for p in kc.call.function.outputs}
    read = {g.value.name for g in k1.launch.args if g.kind == "array" and g.value.name in written}
    assert read
    before = k1.source[:k1.source.index("kf_wait_prior();")]
    assert not any(f"g_{v}," in before or f"g_{v})" in before for v in read)


# ---- wide tiles (a variant's own blocking) and finish routines ------------------------------
def wide_bicgk(lib, by=8, tc=512, variants=("wide", "wide"), loop="i"):
    prog = parse_script((EXAMPLES[0].parent / "bicgk.kf").read_text(), lib)
    kcs = []
    for call, name in zip(prog.calls, variants):
        var = next(v for v in call.function.variants if v.name == name)
        kcs.append(KernelCall(call, var, tuple((m, {"BY": by, "TC": tc}[m]) for m in var.macros)))
    return KernelSpec("k0", tuple(kcs), stores=frozenset(v.id for v in prog.outputs), loop=loop)


def test_wide_bicgk_structure(lib):
    """BiCGK over 32 x 512 tiles: A read once into registers (16-byte pieces, 4 per row and
    thread), q's row partials stored every iteration, s's column partials staged in shared memory
    after the loop by the finish routine and added by the store after exactly one barrier."""
    k = build_kernel(wide_bicgk(lib), lib)
    pre, loop, post = loop_body(k.source)
    assert k.launch.axis_extent == (32, 512) and k.launch.threads == 256
    assert k.placement.registers == {"A": 64, "p": 16, "q": 4, "r": 4, "s": 16}
    assert list(k.placement.shared) == ["c1_gemtv_part"] and k.launch.smem_bytes_per_real == 8 * 512
    assert "wcolvec_load<8, 512>(rix, g_p, e_p);" in pre
    assert loop.count("wtile_load<8, 512>(rix, g_A, e_A);") == 1 and "__syncthreads" not in loop
    assert "wrowsum_store<8, 512>(rix, e_q, g_q);" in loop
    assert k.barriers == 1 and "__syncthreads" not in pre
    gather, store = post.index("wcolsum_gather<8, 512>"), post.index("wcolsum_store<8, 512>")
    assert gather < post.index("__syncthreads();") < store


def test_wide_tiles_do_not_share_a_kernel_with_square_ones(lib):
    with pytest.raises(FusionError, match="tiles of different shapes .*32x32, 32x512"):
        build_kernel(wide_bicgk(lib, variants=("quad", "wide")), lib)


def test_wide_registers_beyond_the_limit_are_refused(lib):
    """BY = 4, TC = 512: 128 register entries for A alone, 176 in the fused kernel."""
    with pytest.raises(FusionError, match="register entries per thread"):
        build_kernel(wide_bicgk(lib, by=4, tc=512), lib)


def test_quad_mappings_cover_several_pieces_per_row():
    """Slot k of qrows / quad under 32 threads in x and M = C / 128 pieces: every entry of the
    tile or subvector exactly once over all threads and slots."""
    from kfuse.library.mappings import MAPPINGS
    for C, Y in ((128, 8), (256, 4), (512, 8)):
        R, M = 32, C // 128
        q = MAPPINGS["qrows"]
        assert q.check((R, C), 32, Y) is None and q.slots((R, C), 32, Y) == 4 * M * (R // Y)
        expr = q.offset((R, C), C, 32, Y)
        seen = [eval(expr.replace("/", "//"), {}, {"tx": tx, "ty": ty, "k": k})
                for tx in range(32) for ty in range(Y) for k in range(q.slots((R, C), 32, Y))]
        assert sorted(seen) == list(range(R * C))
        v = MAPPINGS["quad"]
        expr = v.offset((C,), 0, 32, 1)
        seen = [eval(expr.replace("/", "//"), {}, {"tx": tx, "k": k}) for tx in range(32) for k in range(v.slots((C,), 32, 1))]
        assert sorted(seen) == list(range(C))
    assert MAPPINGS["qrows"].check((32, 32), 32, 8) is not None     # 32 columns cannot feed 32 x 4
