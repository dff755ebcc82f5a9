"""Loaded at start-up by every Python that ``wanscope profile -- COMMAND`` starts (this folder
is first on its ``PYTHONPATH``). Imports only the standard library.

It runs the ``sitecustomize`` it shadows (the next one on ``sys.path``, if any), takes this
folder off ``sys.path`` again, and, where ``WANSCOPE_PROFILE`` holds the settings, loads
``_wanscope_boot`` (beside this file), which profiles the program's steps.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows, as Python would have without us."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.origin:
        _load("sitecustomize", spec.origin)


if os.environ.get("WANSCOPE_PROFILE"):
    _load("_wanscope_boot", os.path.join(_HERE, "_wanscope_boot.py")).install()
_chain()
