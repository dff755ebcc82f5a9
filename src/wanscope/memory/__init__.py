"""What filled GPU memory: PyTorch's CUDA allocator snapshots (``torch.cuda.memory._dump_snapshot``,
``wanscope profile --memory-history``) read without torch, replayed to the peak or to the failed
allocation of an out-of-memory error, and the live allocations there grouped by the Python stack
that made them.

``snapshot.py`` reads the pickle (data only: no class is ever imported), ``analysis.py`` replays
it, ``text.py`` prints it, ``cli.py`` is ``wanscope memory``; ``record.py`` (torch) records one
around our engine's run.
"""
