"""`import kernels` from a checkout's root: this folder shadows Hugging Face's `kernels` package.

The folder installs as `videogen.kernels`, so a wheel never shadows anything. From a checkout,
`python -m pytest` or `python -m videogen.cli` puts the root on `sys.path`, and transformers 5
(whose dependency `kernels` is) finds this folder first when it imports `kernels`, then fails on
names it lacks (`CUDAProperties`). `hand_over` loads the package the importer meant from the
rest of `sys.path` into the module being imported, so `import kernels` gets it; with no such
package the import fails as it would without this folder.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def hand_over(name: str) -> None:
    """Replace `sys.modules[name]` (this folder, being imported) with the package of that name
    found on the rest of `sys.path`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        del sys.modules[name]
        raise ModuleNotFoundError(
            f"No module named {name!r} outside {root} (this checkout's folder is videogen.kernels)",
            name=name,
        )
    # The import system hands the importer whatever `sys.modules` holds for the name once this
    # folder's `__init__` returns: the real package, loaded here.
    real = importlib.util.module_from_spec(spec)
    sys.modules[name] = real
    try:
        spec.loader.exec_module(real)
    except BaseException:
        del sys.modules[name]
        raise
