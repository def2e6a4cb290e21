"""Checking and converting the scalars a program is called with."""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import LaunchError


def to_scalar(x, name: str, dtype: np.dtype):
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, np.generic)) or isinstance(x, np.bool_):
        if getattr(x, "ndim", None) == 0 and hasattr(x, "item"):      # a 0-d CuPy array or torch tensor
            return dtype.type(x.item())
        raise LaunchError(f"{name}: expected a real number for a scalar input, got {type(x).__name__}")
    value = dtype.type(x)
    if not np.isfinite(value) and np.isfinite(float(x)):
        raise LaunchError(f"{name}: {x!r} does not fit in {dtype}")
    return value
