"""The compiled barrier check (issue 60, finding 17): the PTX reader (no compiler)."""
from __future__ import annotations

from kfuse.codegen import ptx

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
