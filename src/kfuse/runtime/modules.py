"""An artifact's GPU module and kernels on a device, built for the kernels' block orders
(``runtime/order.py``): compiled once per choice and kept by the runtime, per artifact (a table
that goes with the artifact) and per source digest and device (``compiler.load_module``)."""
from __future__ import annotations

from weakref import WeakKeyDictionary

from ..ir.artifact import Artifact
from .compiler import load_module
from .order import order_defines, with_orders

# artifact -> (kind, device, orders) -> the module or the functions
_loaded: WeakKeyDictionary[Artifact, dict] = WeakKeyDictionary()


def _table(artifact: Artifact) -> dict:
    table = _loaded.get(artifact)
    if table is None:
        table = _loaded.setdefault(artifact, {})
    return table


def module(artifact: Artifact, device: int, orders: tuple[int, ...] = ()):
    """The compiled module on a device (the current one), built for the kernels' orders (none
    given: order 0 throughout)."""
    table = _table(artifact)
    key = ("module", device, tuple(orders))
    if key not in table:
        source = artifact.source
        missing = order_defines(artifact.kernels, orders, source)
        if missing and artifact.shared is not None:
            # a module shared with other programs, built for other orders: this program's own
            # module is smaller to compile than the shared one again
            source = artifact.own_source
            missing = order_defines(artifact.kernels, orders, source)
        table[key] = load_module(with_orders(source, missing))
    return table[key]


def functions(artifact: Artifact, device: int, orders: tuple[int, ...] = ()) -> list:
    """The compiled kernels on a device, in launch order."""
    table = _table(artifact)
    key = ("functions", device, tuple(orders))
    if key not in table:
        built = module(artifact, device, orders)
        table[key] = [built.get_function(k.launch.kernel) for k in artifact.kernels]
    return table[key]


def fill_function(artifact: Artifact, device: int, orders: tuple[int, ...] = ()):
    """The module's kf_fill kernel (clears reduced outputs before a kernel)."""
    return module(artifact, device, orders).get_function("kf_fill")


__all__ = ["fill_function", "functions", "module"]
