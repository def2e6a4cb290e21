"""The device loop's generated texts stay byte-identical: every case of ``loop_text_cases`` (the
control module, the persistent and merged kernels, the head wrapper, the returned arithmetic's
module and the C of conditions, for fixed arguments and synthetic step kernels) against the
digests recorded at 7e4f7b9, before the text writers moved out of the runtime (issue 59) into
``codegen/loop/``."""
import json
import types

import numpy as np

import loop_text_cases as cases
from conftest import ROOT

RECORDED = ROOT / "tests" / "data" / "loop_texts.json"


def _api():
    """The text writers: the loop's writer (``codegen/loop.LoopWriter``, what a ``LoopArtifact``
    hands the runtime), the C expression writer and the returned arithmetic's module."""
    from kfuse.codegen.loop import LoopWriter
    from kfuse.codegen.loop.cexpr import c_expr
    from kfuse.codegen.loop.scalars import ScalarCode
    from kfuse.ir import loop
    w = LoopWriter()
    return types.SimpleNamespace(
        control_source=lambda d, t, p, c, clears, saved, carried: w.control(d, t, p, c, clears, saved, carried),
        c_expr=c_expr, Kernel=loop.Kernel,
        PShape=loop.PersistentShape, persistent_text=lambda s, d: w.persistent(s, np.dtype(d)),
        MShape=loop.MergedShape, merged_text=lambda s, d, n: w.merged(s, np.dtype(d), n), head_text=w.head,
        scalar_source=lambda d, e, r, nums: ScalarCode(d, tuple(e), tuple(r), numbers=True).source(nums))


def test_loop_texts_are_the_recorded_ones():
    want = json.loads(RECORDED.read_text())["digests"]
    got = cases.digests(cases.cases(_api()))
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
