"""Candidates of the empirical search (tuning/measure.py) on the CPU: a kernel that several
candidate plans build alike is named alike and compiled once; the shared modules build with nvcc."""
import itertools
import re

import kfuse
from kfuse.frontend.random_scripts import random_script
from kfuse.tuning import measure

from test_nvcc import nvcc_compile


def _candidates(monkeypatch, lib, seed, top=20):
    monkeypatch.setattr(measure, "launch_orders", lambda c, dims, device, pdl: (0,) * len(c.kernels))
    compiled = kfuse.compile(random_script(lib, seed).text, tuned=False, calibration=False)
    plans = list(itertools.islice(compiled.search.plans(), top))
    return plans, measure.candidates_for(compiled, plans, compiled.search.dims, 0, False)


def _body(code) -> str:
    return code.source.replace(code.launch.kernel, "@")


def test_shared_kernels_are_named_alike_and_only_they(monkeypatch, lib):
    saved = 0
    for seed in range(4):
        plans, cands = _candidates(monkeypatch, lib, seed)
        assert len(cands) == len(plans)
        by_name: dict[str, str] = {}
        for plan, c in zip(plans, cands):
            assert [kc.call.index for k in c.plan.kernels for kc in k.calls] == \
                   [kc.call.index for k in plan.kernels for kc in k.calls]     # same plan, other names
            for code in c.kernels:
                assert by_name.setdefault(code.launch.kernel, _body(code)) == _body(code)
        bodies = list(by_name.values())
        assert len(set(bodies)) == len(bodies)          # two names never hold the same code
        saved += sum(len(c.kernels) for c in cands) - len(by_name)
    assert saved > 0                                    # these scripts' top plans do share kernels


def test_shared_module_holds_each_kernel_once_and_builds(monkeypatch, lib, nvcc, tmp_path):
    plans, cands = _candidates(monkeypatch, lib, 2, top=8)
    source, _ = measure.share_module(cands, "test candidates")
    names = {code.launch.kernel for c in cands for code in c.kernels}
    for name in names:
        assert source.count(f"\n{name}(") == 1       # its definition
    nvcc_compile(nvcc, source, tmp_path)
