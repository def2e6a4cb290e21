"""The pipeline and the compiler session: stages named and timed, the session's complete key, and
compiled scripts that never change (CPU)."""
import dataclasses
import gc

import pytest

import kfuse
from kfuse.compiler.compiled import CompiledScript
from kfuse.progress import PASSES
from kfuse.compiler.pipeline import STAGES
from kfuse.compiler.session import CompileKey, CompilerSession

BICGK = "matrix A; vector p, q, r, s; input A, p, r; q = gemv(A, p); s = gemtv(A, r); return q, s;"
SCALED = "scalar a; vector x, y; input a, x; y = scal(a, x); return y;"


def test_stages_are_named_and_timed_in_data_flow_order():
    prog = kfuse.compile(BICGK, calibration=False, tuned=False)
    assert STAGES == PASSES == ("library", "parse", "space", "rank", "partition", "lower", "emit", "load")
    assert list(prog.timings.seconds) == ["library", "parse", "space", "rank", "partition", "lower"]
    prog.cuda_source                        # emitted on first read, by a stage of its own: the compile's
    assert list(prog.timings.seconds) == ["library", "parse", "space", "rank", "partition", "lower"]   # times stay
    from kfuse.cli.main import _with_emit   # kfuse plan --timings times the emit stage itself
    fresh = kfuse.compile(BICGK, calibration=False, tuned=False)
    assert _with_emit(fresh).describe().splitlines()[-2].startswith("  emit")


def test_compiled_script_is_frozen_and_its_renderers_hold_no_compiled_script():
    prog = kfuse.compile(BICGK, calibration=False, tuned=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prog.plan = prog.plan
    assert isinstance(prog.kernels, tuple) and isinstance(prog.session, CompilerSession)
    for render in (prog.artifact.render_module, prog.artifact.render_persistent):
        assert not any(isinstance(a, CompiledScript) for a in (*render.args, *render.keywords.values()))
    assert not any(isinstance(v, (dict, list)) and v for v in vars(prog).values())   # no cache of its own
    tuned = dataclasses.replace(prog, tuning={"time_us": 1.0})
    assert tuned.artifact is not prog.artifact and prog.tuning is None


def test_session_keeps_replans_under_a_complete_key():
    prog = kfuse.compile(BICGK, calibration=False, tuned=False)
    session = prog.session
    small = {d.id: 1000 for d in prog.program.dims}
    other = prog.for_sizes(small)
    assert other is not prog and other.session is session and other.search.dims == small
    assert prog.for_sizes(small) is other and other.for_sizes({d.id: 1023 for d in prog.program.dims}) is other
    keys = [k for k in session._made]
    assert all(isinstance(k, CompileKey) for k in keys) and len(keys) == 2
    k = keys[1]
    assert k.sizes == (10, 10) and k.device_scalars == frozenset() and k.dtype == "float32"
    assert k.library == prog.library.digest and k.options.search.vector_on_strips is False and k.plan is None
    # another dtype, library or options is another session, so another key
    again = kfuse.compile(BICGK, calibration=False, tuned=False, dtype="float64")
    assert again.session is not session and again.session.key(again.program, (10, 10)) != k


def test_device_scalars_and_given_plans_are_the_sessions():
    prog = kfuse.compile(SCALED, calibration=False, tuned=False)
    dev = prog.for_device_scalars({"a"})
    assert dev is prog.for_device_scalars(["a"]) and dev.program.device_scalars() == {"a"}
    assert dev.for_device_scalars(()) is not dev          # back to the host scalar: planned for it
    pinned = prog.with_plan(prog.plan)
    assert pinned.pinned and pinned.session is prog.session
    assert pinned.for_device_scalars({"a"}) is pinned.for_device_scalars({"a"})
    assert pinned.for_device_scalars({"a"}).pinned


def test_share_source_returns_a_new_compiled_script():
    prog = kfuse.compile(BICGK, calibration=False, fuse=False)
    shared = prog.share_source("// shared\n" + prog.cuda_source)
    assert shared is not prog and shared.cuda_source.startswith("// shared")
    assert not prog.cuda_source.startswith("// shared") and shared.artifact.own_source == prog.artifact.own_source
    assert shared.artifact.shared is not None and prog.artifact.shared is None


def test_share_source_refuses_a_module_without_its_kernels():
    """share_source(5) or a module lacking the program's kernels was accepted: the mistake
    surfaced as an NVRTC or launch error at the first GPU call."""
    prog = kfuse.compile(BICGK, calibration=False, fuse=False)
    with pytest.raises(kfuse.KfuseError, match="share_source takes a CUDA module's text, got int"):
        prog.share_source(5)
    other = kfuse.compile("vector x, y; input x; y = scal(2, x); return y;", calibration=False, fuse=False)
    with pytest.raises(kfuse.KfuseError, match=r"the module holds no kernel k0_gemv, k1_gemtv of script"):
        prog.share_source(other.cuda_source)


def test_a_compiled_script_goes_with_its_session():
    import weakref
    prog = kfuse.compile(BICGK, calibration=False, tuned=False)
    gone = weakref.ref(prog.session)
    del prog
    gc.collect()
    assert gone() is None
