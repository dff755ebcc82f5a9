"""wanscope: a lean Wan2.1 text-to-video engine and a GPU performance lab.

The analysis side (``wanscope.trace``, ``wanscope.analysis``, ``wanscope.ncu``,
``wanscope.report``) never imports torch; the engine (``wanscope.wan``) does.
"""

__version__ = "0.1.0"
