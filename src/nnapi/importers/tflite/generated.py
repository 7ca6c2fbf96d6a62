"""The generated TFLite schema bindings (the `tflite` package: flatbuffers classes of the enums and
options), one module at a time.

`import tflite` runs an `__init__` that imports all 188 generated modules (about 70 ms here), of which a
model's import needs a handful. Each generated module imports only `flatbuffers` (its references to
other tables are imports inside methods), so `generated(name)` loads `tflite/<name>.py` alone, as the
module `tflite.<name>`: a later `import tflite` finds it loaded and reuses it.
"""
from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any

_lock = threading.Lock()


def generated(name: str) -> Any:
    """The generated class `tflite.<name>` (e.g. "Conv2DOptions", "BuiltinOperator"); AttributeError naming
    it when the schema has no such class."""
    qualified = f"tflite.{name}"
    module = sys.modules.get(qualified)
    if module is None:
        with _lock:
            module = sys.modules.get(qualified)
            if module is None:
                module = _load(name, qualified)
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"the TFLite schema has no class {name!r}") from None


def _load(name: str, qualified: str) -> Any:
    """`tflite/<name>.py` executed as the module `qualified` (without the package's `__init__`)."""
    package = importlib.util.find_spec("tflite")
    folders = list(package.submodule_search_locations or ()) if package is not None else []
    if not name.isidentifier() or not folders:
        raise AttributeError(f"the TFLite schema has no class {name!r}")
    spec = importlib.util.spec_from_file_location(qualified, f"{folders[0]}/{name}.py")
    if spec is None or spec.loader is None:
        raise AttributeError(f"the TFLite schema has no class {name!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    try:
        spec.loader.exec_module(module)
    except FileNotFoundError:
        del sys.modules[qualified]
        raise AttributeError(f"the TFLite schema has no class {name!r}") from None
    except BaseException:
        del sys.modules[qualified]
        raise
    return module


__all__ = ["generated"]
