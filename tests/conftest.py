import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.kf"))


def gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver or no device: no GPU
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
