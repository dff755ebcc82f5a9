"""wanscope: a lean Wan2.1 text-to-video engine and a GPU performance lab.

The analysis side (``wanscope.trace``, ``wanscope.analysis``, ``wanscope.ncu``,
``wanscope.report``) never imports torch; the engine (``wanscope.wan``) does. ``import wanscope``
imports none of torch, DuckDB or pandas: ``wanscope.open`` (``api.py``, docs/api.md) and
``wanscope.step`` (``profile/marker.py``) load on first use.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("open", "Trace"):
        from wanscope import api

        return getattr(api, name)
    if name == "step":
        from wanscope.profile.marker import step

        return step
    raise AttributeError(f"module 'wanscope' has no attribute {name!r}")
