import os
import subprocess
import sys

import pytest

from conftest import ROOT, gpu_available


@pytest.mark.skipif(gpu_available(), reason="this machine can run the GPU tests")
def test_asking_for_gpu_tests_without_a_gpu_fails():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-m", "gpu", "tests/test_gpu_tuning.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0, run.stdout
    assert "no CUDA GPU" in run.stdout + run.stderr
