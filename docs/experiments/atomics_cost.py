"""What the atomic adds of the row and column reductions cost: the model's top plans of a sequence
timed as generated, with the row-partial atomics (rowsum_store, qrowsum_store) disabled, with
the column-partial atomics (colsum_store, qcolsum_store) disabled, and with both.  "Disabled"
guards the add with a test on the value that never holds, so every load and every sum stays;
the results are then wrong (timing only).  Cold L2, median of CUDA events.  The edits are made
to the candidates' shared module text before it is compiled (``CompiledScript.share_source``).

    python docs/experiments/atomics_cost.py [--top K] SEQ ...
"""
import argparse

from explore_util import candidates, describe, max_error, top_plans

from kfuse.runtime.gpu import cupy
from kfuse.runtime.timing import median_us

NEVER = "real(-1.2345e-30)"
ROW = [("if (lane % G == 0) g.add(", f"if (lane % G == 0 && s == {NEVER}) g.add("),
       ("if (l % G == 0) g.add(", f"if (l % G == 0 && s == {NEVER}) g.add(")]
COL = [("g.add(ix.j * KF_TC + ix.tx, v(0));", f"if (v(0) == {NEVER}) g.add(ix.j * KF_TC + ix.tx, v(0));"),
       ("for (int e = 0; e < 4; ++e) g.add(ix.j * KF_TC + 4 * ix.tx + e, t[e]);",
        f"for (int e = 0; e < 4; ++e) if (t[e] == {NEVER}) g.add(ix.j * KF_TC + 4 * ix.tx + e, t[e]);")]
# 16-byte vector reductions (red.global.add.v4.f32, sm_90): the column partials' four entries per
# lane in one instruction; the row partials gathered from the four lanes holding rows ty .. ty+3
# (quad tiles: lanes tx, tx+8, tx+16, tx+24 of a warp) into the lane of ty % 4 == 0
RED4 = [("template <int N>\nstruct KfReg", """KF_DEVICE void kf_red4(const KfVec& g, long long e, const real (&v)[4]) {
    if (g.quad_ok(e)) {
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                     :: "l"(g.p + e), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
    } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) g.add(e + k, v[k]);
    }
}

template <int N>
struct KfReg""")]
V4COL = [("""    if ((ix.ty & 3) == 0) {
#pragma unroll
        for (int e = 0; e < 4; ++e) g.add(ix.j * KF_TC + 4 * ix.tx + e, t[e]);
    }""", """    if ((ix.ty & 3) == 0) kf_red4(g, ix.j * KF_TC + 4 * ix.tx, t);""")]
V4ROW = [("    if (l % G == 0) g.add(ix.i * KF_TR + ix.ty + BY * (l / G), s);", """    real q4[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) q4[c] = __shfl_sync(0xffffffffu, s, l + 8 * c);
    if ((ix.ty & 3) == 0 && l % G == 0) kf_red4(g, ix.i * KF_TR + ix.ty + BY * (l / G), q4);""")]
MODES = {"as generated": [], "no row atomics": ROW, "no column atomics": COL, "no atomics": ROW + COL,
         "v4 rows": RED4 + V4ROW, "v4 columns": RED4 + V4COL, "v4 both": RED4 + V4ROW + V4COL}


def edited(edits):
    """The module text with ``edits`` (old, new) made in it."""
    def edit(source):
        for old, new in edits:
            assert old in source or "rowsum_store" not in source, old
            source = source.replace(old, new)
        return source
    return edit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("seqs", nargs="+")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--modes", default=None, help="comma-separated subset of the modes")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--spans", default=None, help="spans of the nested kernels instead of kfuse's, e.g. 1,2,4,8")
    a = ap.parse_args()
    spans = tuple(int(x) for x in a.spans.split(",")) if a.spans else None
    cp = cupy()
    for seq in a.seqs:
        for mode, edits in ((m, MODES[m]) for m in (a.modes.split(",") if a.modes else MODES)):
            c, dims, plans = top_plans(seq, a.top, spans=spans)
            cands, case = candidates(c, plans, dims, f"{seq} {mode}", edit=edited(edits))
            times = [median_us(x.bind(**case[0]), reps=a.reps, cold_l2=True) for x in cands]
            if mode.startswith("v4"):       # these must still be right
                for n, x in enumerate(cands):
                    err = max_error(x, case)
                    if not err < 1e-5:
                        print(f"  {mode}: plan {n + 1} WRONG (error {err:.1e})")
            if mode == "as generated":
                for n, pl in enumerate(plans):
                    print(f"  plan {n + 1:2d}: {describe(pl)}")
            print(f"{seq:8s} {mode:18s} " + " ".join(f"{t:6.1f}" for t in times) + f"   best {min(times):6.1f}",
                  flush=True)
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
