"""Import videogen's torch-free modules (spec, errors, presets, plan) without importing torch.

`videogen/__init__.py` re-exports `render`, which imports torch, so a plain `import videogen.spec`
pulls torch (~1 s and ~300 MB) into the API process. Until the package's `__init__` becomes lazy
(requested from the foundation owner), `load()` registers `videogen` as a lazy package (PEP 562):
its submodules import normally, and the real `__init__` runs only when someone reads an attribute
the package itself defines (`videogen.render`, `videogen.RenderSpec`, ...). When `videogen` is
already imported this does nothing, so it is harmless in a worker process.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

_lock = threading.RLock()
# Names `videogen/__init__.py` defines itself; `render` is also a submodule, shadowed by the function.
_INIT_EXPORTS = {"render", "RenderSpec", "Shot", "__version__"}


def _install_lazy_package() -> None:
    if "videogen" in sys.modules:
        return
    found = importlib.util.find_spec("videogen")
    if found is None or found.loader is None:
        raise ImportError("the videogen package is not installed")
    module = importlib.util.module_from_spec(found)  # created, not executed
    state = {"ran": False}

    def __getattr__(name: str):  # PEP 562: only called for names not yet on the module
        if name.startswith("__") and name != "__version__":
            raise AttributeError(name)
        if name not in _INIT_EXPORTS and importlib.util.find_spec(f"videogen.{name}") is not None:
            return importlib.import_module(f"videogen.{name}")  # `from videogen import settings`
        with _lock:
            if not state["ran"]:
                state["ran"] = True
                found.loader.exec_module(module)  # the real __init__ (imports torch)
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'videogen' has no attribute {name!r}") from None

    module.__getattr__ = __getattr__
    sys.modules["videogen"] = module


def load(name: str):
    """`load("spec")` -> the `videogen.spec` module, without running `videogen/__init__`."""
    with _lock:
        _install_lazy_package()
    return importlib.import_module(f"videogen.{name}")
