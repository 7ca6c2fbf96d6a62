"""A driver's settings, declared once: each is a keyword of the device, else an environment variable,
else a default (`Option`), read when used, so a setting changed in the environment applies from the next
preparation. A device lists its own in `DriverDevice.OPTIONS`; the base reads them (`DriverDevice.option`)
and makes the calibration twin with them (`CALIBRATION_OPTIONS` on top).

Also the helpers drivers share to read the environment, to make a backend object once per device
(`once`), and to import a backend with the environment it wants for its import only (`import_with_env`).
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


def env_flag(name: str) -> bool:
    """True when environment variable `name` says yes (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def env_int(name: str) -> int | None:
    """A non-negative integer from the environment, None when unset or not a number."""
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class Option:
    """One setting: the environment variable read when no keyword gave it, its kind (int: a non-negative
    integer; bool: a yes/no flag) and the default when neither says anything."""

    env: str
    kind: type = int
    default: Any = None
    help: str = ""

    def read(self) -> Any:
        """The environment's value, or the default when the variable is unset (or, for an int, no number)."""
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default
        if self.kind is bool:
            return env_flag(self.env)
        value = env_int(self.env)
        return self.default if value is None else value


class Options:
    """The values a device was made with, by name, over its declared `Option`s."""

    def __init__(self, owner: str, declared: dict[str, Option], given: dict[str, Any]) -> None:
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise TypeError(f"{owner}() got unexpected keyword arguments {unknown}; its options are "
                            f"{sorted(declared)}")
        self.declared = declared
        #: What the keywords said (None: not said, so the environment and the default decide).
        self.given = {k: v for k, v in given.items() if v is not None}

    def __getitem__(self, name: str) -> Any:
        if name in self.given:
            return self.given[name]
        return self.declared[name].read()


class once(Generic[T]):
    """A per-object value made on first use, under a lock (a thread-safe `functools.cached_property`):
    a backend's core or context, which a device makes once and only when it first needs it."""

    def __init__(self, make: Callable[[Any], T]) -> None:
        self.make = make
        self.name = make.__name__
        self.__doc__ = make.__doc__
        self.lock = threading.Lock()

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        value = obj.__dict__.get(self.name, self)
        if value is self:
            with self.lock:
                value = obj.__dict__.get(self.name, self)
                if value is self:
                    value = obj.__dict__[self.name] = self.make(obj)
        return value


def import_with_env(module: str, **env: str) -> None:
    """Import `module` (once) with environment variables set for the duration of that import only, and
    put back as they were: how a backend is told something at import time without touching the app's
    environment afterwards."""
    if module in sys.modules:
        return
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        importlib.import_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


__all__ = ["Option", "Options", "env_flag", "env_int", "import_with_env", "once"]
