"""Checks of configuration values: every failure names the field and the value it got."""
from __future__ import annotations

from numbers import Integral, Real


def require(cond: bool, msg: str) -> None:
    """Raise ValueError(msg) unless cond (configuration checks)."""
    if not cond:
        raise ValueError(msg)


def is_int(x) -> bool:
    """An integer that is not a bool (numpy integers count)."""
    return isinstance(x, Integral) and not isinstance(x, bool)


def is_real(x) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def check_field_types(cfg) -> None:
    """Every ``int`` / ``float`` / ``bool`` field of a config dataclass holds a value of that kind
    (numpy scalars count; a bool is not an int), so a typo fails here with the field's name."""
    ok = {"int": is_int, "float": is_real, "bool": lambda x: isinstance(x, bool)}
    for f in cfg.__dataclass_fields__.values():
        test = ok.get(f.type if isinstance(f.type, str) else getattr(f.type, "__name__", ""))
        if test is not None and not test(getattr(cfg, f.name)):
            raise ValueError(f"{type(cfg).__name__}.{f.name} must be {'a' if f.type != 'int' else 'an'} {f.type}, "
                             f"got {getattr(cfg, f.name)!r}")
