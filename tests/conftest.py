import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.kf"))
_MADE = "KFUSE_TESTS_MADE_CACHE"     # the cache folder a test session made (not the caller's)


def gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver or no device: no GPU
        return False


def pytest_addoption(parser):
    """pyproject's addopts ask for ``--numprocesses=auto`` (pytest-xdist, in the ``test`` extra);
    where xdist is not installed the option is taken and the tests run in one process."""
    try:
        import xdist  # noqa: F401
    except ImportError:
        parser.addoption("--numprocesses", default=None,
                         help="workers (pytest-xdist is not installed: the tests run in one process)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``--numprocesses=auto``: a worker per core (at most 8) for CPU runs -- nvcc builds and planning keep
    each busy; none (one process) where the marker expression selects GPU tests: they share one
    device, whose memory and timing a second process would disturb."""
    expr = config.getoption("markexpr") or ""
    if re.search(r"(?<!not )\bgpu\b", expr) or re.search(r"\bmultigpu\b", expr):
        return 0
    return max(1, min(8, len(os.sched_getaffinity(0))))


def pytest_configure(config):
    """The tests neither read nor write the user's kfuse stores (tuning store, calibration in
    ~/.cache/kfuse): a tuned winner or a calibration made there would change the plans the tests
    get, and the tuning tests would leave their winners there.  Unless KFUSE_CACHE_DIR is set
    (the GPU suite's halves run side by side with one each), the session takes a fresh one; each
    xdist worker takes its own (they inherit the controller's, which made it: ``_MADE``)."""
    made = os.environ.get(_MADE)
    if not os.environ.get("KFUSE_CACHE_DIR") or made == os.environ.get("KFUSE_CACHE_DIR"):
        root = tempfile.mkdtemp(prefix="kfuse-tests-")
        os.environ["KFUSE_CACHE_DIR"] = os.environ[_MADE] = root
        config.add_cleanup(lambda: shutil.rmtree(root, ignore_errors=True))


def pytest_collection_modifyitems(config, items):
    """Tests of several GPUs (``multigpu``, also marked ``gpu``) run only when the marker
    expression names them (``-m multigpu``): ``-m gpu`` is the suite of one GPU, which would
    otherwise fail them ("N GPUs needed, 1 visible") on every machine with fewer GPUs."""
    if "multigpu" in (config.getoption("markexpr") or ""):
        return
    several = [item for item in items if "multigpu" in item.keywords]
    if several:
        config.hook.pytest_deselected(items=several)
        items[:] = [item for item in items if "multigpu" not in item.keywords]


def pytest_collection_finish(session):
    """GPU tests asked for (``-m gpu``) on a machine that cannot run them: fail, never skip.

    The default run (``-m 'not gpu'`` from pyproject) deselects them, so this only fires
    when a selected test carries the ``gpu`` marker."""
    wanted = [item.nodeid for item in session.items if "gpu" in item.keywords]
    if wanted and not gpu_available():
        pytest.exit(f"{len(wanted)} GPU test(s) selected (e.g. {wanted[0]}) but no CUDA GPU "
                    "with CuPy is usable on this machine; run them where one is, or "
                    "deselect them with -m 'not gpu'", returncode=3)


@pytest.fixture(autouse=True)
def _no_routine_waits_from_another_test(monkeypatch):
    """No library routine of another test waits for the barrier check at ``load_module``
    (codegen/barrier_check.py): a test's module would otherwise check them first, with NVRTC --
    which a CuPy stand-in has not.  Verdicts already reached stay (the same for every test)."""
    from kfuse.codegen import barrier_check
    monkeypatch.setattr(barrier_check, "_required", [])
    monkeypatch.setattr(barrier_check, "_done", {})


@pytest.fixture(scope="session")
def nvcc() -> str:
    """Path of nvcc; CPU tests that compile generated code fail (not skip) without it."""
    path = shutil.which("nvcc")
    assert path, "nvcc is required for the compile tests (CUDA toolkit on PATH)"
    return path


@pytest.fixture(scope="session")
def lib():
    from kfuse import load_library
    return load_library()
