"""Packaging metadata: one version number, py.typed shipped, GPU extras, license and project URLs,
no binaries tracked (CPU)."""
import tomllib

import kfuse

from conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_one_version_number():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kfuse.__version__"}
    assert kfuse.__version__.count(".") == 2


def test_py_typed_is_shipped():
    assert (ROOT / "src" / "kfuse" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["kfuse"]


def test_license_urls_and_classifiers():
    """Apache-2.0 in the file and the metadata (PEP 639, hence setuptools >= 77), the project's
    URLs and classifiers."""
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]
    assert project["urls"]["Source"] == "https://github.com/kfuse/kfuse"
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])   # PEP 639: the expression only


def test_no_wheels_or_archives_tracked():
    import subprocess
    proc = subprocess.run(["git", "ls-files", "*.whl", "*.tar.gz", "*.zip", "*.so"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        import pytest
        pytest.skip("not a git checkout")
    assert proc.stdout.split() == []
    assert "*.whl" in (ROOT / ".gitignore").read_text().splitlines()


def test_gpu_extras():
    extras = PYPROJECT["project"]["optional-dependencies"]
    # [ctk]: CuPy's extra that pulls NVRTC (and the runtime, cuBLAS) from PyPI; a driver is all else
    assert extras["gpu"] == extras["cuda13"] == ["cupy-cuda13x[ctk]"]
    assert extras["cuda12"] == ["cupy-cuda12x[ctk]"]
    assert not any("cupy" in d for d in PYPROJECT["project"]["dependencies"] + extras["test"])


def test_setuptools_resolves_the_version():
    import warnings
    from setuptools.config.pyprojecttoml import read_configuration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = read_configuration(ROOT / "pyproject.toml")
    assert config["project"]["version"] == kfuse.__version__


def test_built_package_holds_the_examples_and_finds_them(tmp_path):
    """What a wheel installs (setuptools' build_py, as bdist_wheel runs it, on a copy of the
    checkout): the examples as files inside the package, found by ``kfuse bench`` without
    ``--seq`` away from any checkout; py.typed and the library beside them."""
    import shutil
    import subprocess
    import sys
    tree = tmp_path / "checkout"
    tree.mkdir()
    shutil.copytree(ROOT / "src", tree / "src", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "examples", tree / "examples")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    lib = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                           "--build-lib", str(lib)], cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    shipped = lib / "kfuse" / "examples"
    assert not shipped.is_symlink()
    assert sorted(p.name for p in shipped.glob("*.kf")) == sorted(p.name for p in (ROOT / "examples").glob("*.kf"))
    for data in ("py.typed", "blas/blas2.cu", "blas/library.toml", "codegen/prelude.cuh"):
        assert (lib / "kfuse" / data).is_file(), data
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import kfuse; from kfuse.bench.harness import default_sequences, resolve_sequences; "
            "print(kfuse.__file__); print(len(default_sequences())); print(resolve_sequences(['gemver'])[0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(lib)})
    assert out.returncode == 0, out.stderr
    path, count, gemver = out.stdout.split("\n")[:3]
    assert path.startswith(str(lib)) and int(count) == len(list((ROOT / "examples").glob("*.kf")))
    assert gemver == str(shipped / "gemver.kf")
