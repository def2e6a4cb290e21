"""Packaging metadata: one version number, py.typed shipped, GPU extras (CPU)."""
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


def test_gpu_extras():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert extras["gpu"] == extras["cuda13"] == ["cupy-cuda13x"]
    assert extras["cuda12"] == ["cupy-cuda12x"]


def test_setuptools_resolves_the_version():
    import warnings
    from setuptools.config.pyprojecttoml import read_configuration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = read_configuration(ROOT / "pyproject.toml")
    assert config["project"]["version"] == kfuse.__version__
