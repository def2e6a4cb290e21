"""Frozen records made cheaply: a frozen dataclass's generated constructor sets each field through
``object.__setattr__`` (about twice the cost of writing the instance's ``__dict__``), and
planning a long script makes hundreds of thousands of them (accesses, steps, elements, kernels).
``quick_init`` gives such a class a constructor that writes the fields straight into
``__dict__``: same signature and defaults, same instances (equality, hash, repr, the frozen
``__setattr__`` and ``cached_property`` are the dataclass's)."""
from __future__ import annotations

import dataclasses
from typing import TypeVar

T = TypeVar("T")

__all__ = ["quick_init"]


def quick_init(cls: type[T]) -> type[T]:
    """Replace the generated ``__init__`` of frozen dataclass ``cls`` (no ``__post_init__``, no
    ``InitVar``, no ``init=False`` field) by one that fills ``__dict__`` directly."""
    assert dataclasses.is_dataclass(cls) and getattr(cls, "__dataclass_params__").frozen, cls
    assert not hasattr(cls, "__post_init__"), cls
    fields = dataclasses.fields(cls)
    assert all(f.init for f in fields), cls
    env: dict = {"_MISSING": dataclasses.MISSING}
    params, body = [], []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
            body.append(f"    d[{f.name!r}] = {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"    d[{f.name!r}] = _f_{f.name}() if {f.name} is _MISSING else {f.name}")
        else:
            params.append(f.name)
            body.append(f"    d[{f.name!r}] = {f.name}")
    src = (f"def __init__(self, {', '.join(params)}):\n    d = self.__dict__\n" + "\n".join(body or ["    pass"])
           + "\n")
    exec(src, env)      # noqa: S102 - the source is made above from the class's field names only
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)
    return cls
