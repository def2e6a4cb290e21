"""The device loop's generated texts stay byte-identical: every case of ``loop_text_cases`` (the
control module, the persistent and merged kernels, the head wrapper, the returned arithmetic's
module and the C of conditions, for fixed arguments and synthetic step kernels) against the
digests recorded at 7e4f7b9, before the text writers moved out of the runtime (issue 59)."""
import json
import types

import numpy as np

import loop_text_cases as cases
from conftest import ROOT

RECORDED = ROOT / "tests" / "data" / "loop_texts.json"


def _api():
    """The text writers: in the runtime (7e4f7b9)."""
    from kfuse.runtime import control, merged, persistent
    return types.SimpleNamespace(
        control_source=control.control_source, c_expr=control.c_expr, Kernel=persistent.Kernel,
        PShape=persistent.Shape, persistent_text=lambda s, d: persistent.kernel_text(s, np.dtype(d)),
        MShape=merged.Shape, merged_text=lambda s, d, n: merged.kernel_text(s, np.dtype(d), n),
        head_text=merged.head_text,
        scalar_source=lambda d, e, r, nums: control.ScalarTail(d, e, r, numbers=True).source(nums))


def test_loop_texts_are_the_recorded_ones():
    want = json.loads(RECORDED.read_text())["digests"]
    got = cases.digests(cases.cases(_api()))
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []
