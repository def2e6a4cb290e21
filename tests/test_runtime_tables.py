"""The runtime's own tables per artifact (launch shapes, loaded modules and kernels): kept by the
runtime, keyed by the artifact, never written into the compiled script, and gone with the
artifact.  On the CuPy stand-in of tests/cupy_standin.py: nothing is compiled or run."""
import gc
import weakref

import pytest

import kfuse

TWO_KERNELS = "matrix A; vector x, y, z; input A, x; y = gemv(A, x); z = gemtv(A, y); return z;"   # unfused


@pytest.fixture
def standin(monkeypatch):
    from cupy_standin import CuPyStandIn
    from kfuse.runtime import compiler
    cp = CuPyStandIn("float32")
    monkeypatch.setattr(compiler, "cupy", lambda: cp)      # compiler's own name only: other modules keep theirs
    monkeypatch.setattr(compiler, "_modules", {})
    return cp


def test_modules_and_shapes_are_the_runtimes_per_artifact(standin, monkeypatch):
    from kfuse.runtime import modules, order
    monkeypatch.setattr(order, "device_limits", lambda device: (132, 1))    # 264 blocks (two waves of 132) at any width
    prog = kfuse.compile(TWO_KERNELS, calibration=False, fuse=False)
    art = prog.artifact
    fns = modules.functions(art, 0)
    assert [f.name for f in fns] == [k.launch.kernel for k in prog.kernels] and len(fns) == 2
    assert modules.functions(art, 0) is fns and prog.calls.functions(0) is fns      # the public API reads them
    assert modules.fill_function(art, 0).name == "kf_fill"
    dims = {d.id: 1000 for d in prog.program.dims}
    shape = order.launch_shape(art, dims, 0)
    assert order.launch_shape(art, dims, 0) is shape and len(shape) == 2
    assert not any(isinstance(v, dict) and v for v in vars(prog).values())     # no table, no cache
    # a module shared with other programs: a new compiled script and artifact, loaded from that module
    shared = prog.share_source("// shared with others\n" + prog.cuda_source).artifact
    assert shared is not art and modules.module(shared, 0).code.startswith("// shared with others")
    # built for block orders the shared module lacks: this program's own module, with the orders
    built = modules.module(shared, 0, (1, 0))
    define = f"#define KF_ORDER_{prog.kernels[0].launch.kernel} 1\n"
    assert "shared with others" not in built.code and define not in prog.cuda_source
    head, kernels = built.code.split(define)      # after the library's files, before the kernels
    assert kernels.startswith("#line") and kernels.split("\n", 1)[0].endswith('"kfuse-generated.cu"')
    assert art in modules._loaded and art in order._tables
    loaded, tables, gone = len(modules._loaded), len(order._tables), weakref.ref(art)
    del art, fns, prog
    gc.collect()
    assert gone() is None                  # the first artifact's tables went with it
    assert len(modules._loaded) == loaded - 1 and len(order._tables) == tables - 1
