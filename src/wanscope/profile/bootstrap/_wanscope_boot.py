"""Inside a program that ``wanscope profile -- COMMAND`` runs: find the program's steps and run
torch.profiler around the profiled ones. Imports only the standard library and, once the
program imports it, torch; the program need not have wanscope installed.

Settings come from ``WANSCOPE_PROFILE`` (JSON): ``out`` (folder for traces and the per-process
record), ``warmup`` and ``profile_steps`` (steps before the window, steps in it), ``step_rule``
(``auto``, ``marker``, ``diffusers``, ``optimizer`` or ``none``), ``memory`` (PyTorch's memory
events), ``memory_history`` (the CUDA allocator's history, below), ``tool`` (``torch.profiler``,
or ``cuda_profiler`` under Nsight Systems and Nsight Compute: ``cudaProfilerStart`` before the
first profiled step and ``cudaProfilerStop`` after the last, no torch.profiler, since CUPTI takes
one subscriber per process).

Steps, by rule (``auto``: the first rule to see a step claims the run):

- ``marker``: ``wanscope.step()`` begins a step (ending the one open) and ``with wanscope.step():``
  ends it at the block's end; the program's own ``record_function("wanscope/step#k")`` ranges
  are steps too.
- ``diffusers``: a step begins at the first call of a diffusers transformer (or UNet) after the previous
  step's ``scheduler.step`` returned and ends when this step's ``scheduler.step`` returns (both
  CFG branches inside).
- ``optimizer``: a step runs from the end of one ``torch.optim.Optimizer.step`` to the end of
  the next.

Each step is a ``wanscope/step#k`` range in the trace (an NVTX range under the Nsight tools).
torch.profiler runs on a schedule over steps ``warmup - 1`` (its own warm-up, not recorded) to
``warmup + profile_steps - 1``, so the rest of a long run pays nothing. The top process also
records (without shapes or stacks) from the import of torch until the first step; where no step
comes, that recording is the trace (one window). The top process is the first process to import torch
with ``WANSCOPE_PROFILE_TOP`` set: the program, also under Nsight Systems or Nsight Compute,
which start it as their child (and Nsight Compute runs a Python of its own first, which sees
this bootstrap too but imports no torch). It takes the variable out of its environment, so no
process it starts later is the top one. Each process that wrote a trace, or found the program's own
profiler, writes ``.boot-<pid>.json`` into ``out``.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import importlib.abc
import json
import os
import pickle
import signal
import sys
import threading
import time

SETTINGS = json.loads(os.environ.get("WANSCOPE_PROFILE") or "{}")
STEP_RANGE = "wanscope/step#"
OWN_PROFILER = "own_profiler"
TOP = "WANSCOPE_PROFILE_TOP"
MEMORY_MAX_ENTRIES = 100_000  # wanscope.memory.record.MAX_ENTRIES
MEMORY_CONTEXT, MEMORY_STACKS = "alloc", "python"  # wanscope.memory.record.CONTEXT, STACKS
RECORDING_KEY = "wanscope_recording"  # wanscope.memory.snapshot.RECORDING_KEY


class _State:
    torch = None
    rule = None  # the rule that found the steps
    begun = 0  # steps begun so far; the open one is begun - 1
    open_range = None  # our record_function of the open step, or "user" for the program's own
    whole_run = None  # the top process's profiler before the first step
    window = None  # the profiler over the profiled steps
    trace_written = None
    top = False
    pid = None
    started = None  # time.monotonic() at the program's start
    memory = None  # "recording" once the allocator's history is on, "oom" once dumped at an OOM
    snapshot_written = None


def _trace_path(name: str) -> str:
    return os.path.join(SETTINGS["out"], name)


def _trace_name() -> str:
    rank = os.environ.get("RANK")
    return "trace.json.gz" if rank is None else f"trace-rank{rank}.json.gz"


def _profiler(stacks: bool = True, **kw):
    """torch.profiler with our settings; ``stacks``: shapes and Python stacks too (the whole-run
    recording goes without: Python's stack tracing would slow a long start-up many times over)."""
    torch = _State.torch
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(
        activities=activities,
        record_shapes=stacks,
        with_stack=stacks,
        profile_memory=bool(SETTINGS.get("memory")),
        **kw,
    )
    prof._wanscope = True  # ours, not the program's (see _refuse_own_profiler)
    return prof


def _export(prof) -> None:
    """The trace through a temporary name (it must end in .gz for torch to compress it)."""
    name = _trace_name()
    prof.add_metadata_json("wanscope_run", json.dumps({"note": None, "step_rule": _State.rule}))
    _write_through_partial(name, prof.export_chrome_trace)
    _State.trace_written = name


def _write_through_partial(name: str, write) -> None:
    """``write(path)`` to a temporary name beside the output file ``name``, then renamed to it:
    a reader never sees half a file; the temporary one is removed if writing fails."""
    tmp = _trace_path(f".partial-{os.getpid()}-{name}")
    try:
        write(tmp)
        os.replace(tmp, _trace_path(name))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _sync() -> None:
    torch = _State.torch
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


# --- the window -------------------------------------------------------------------------------


def _cuda_profiler() -> bool:
    return SETTINGS.get("tool") == "cuda_profiler"


def _nvtx() -> bool:
    """Steps are NVTX ranges too under the Nsight tools (the trace they write has no
    record_function ranges)."""
    return _cuda_profiler() and _State.torch.cuda.is_available()


def _on_begin(k: int) -> None:
    """Step ``k`` is about to begin (in the main thread only: torch.profiler starts there)."""
    if _State.pid is None or threading.current_thread() is not threading.main_thread():
        return
    warmup, last = SETTINGS["warmup"], SETTINGS["warmup"] + SETTINGS["profile_steps"] - 1
    if _cuda_profiler():
        if k == warmup:
            _start_cuda_profiler()
        return
    if _State.whole_run is not None:  # a step came: the whole-run recording is not needed
        prof, _State.whole_run = _State.whole_run, None
        prof.stop()
    if k == warmup - 1:
        _sync()
        schedule = _State.torch.profiler.schedule(wait=0, warmup=1, active=SETTINGS["profile_steps"], repeat=1)
        _State.window = _profiler(schedule=schedule, on_trace_ready=_export)
        _State.window.start()
    elif _State.window is not None and warmup <= k <= last:
        if k == warmup:
            _sync()  # still in the profiler's warm-up: not recorded
        _State.window.step()


def _start_cuda_profiler() -> None:
    if _State.torch.cuda.is_available():
        _sync()
        _State.torch.cuda.profiler.start()
        _State.window = "cuda_profiler"


def _stop_cuda_profiler() -> None:
    _sync()
    _State.torch.cuda.profiler.stop()
    _State.window = None
    _State.trace_written = "cuda_profiler"  # the tool writes the capture


def _on_end(k: int) -> None:
    """Step ``k`` has ended."""
    if _State.window == "cuda_profiler":
        if k == SETTINGS["warmup"] + SETTINGS["profile_steps"] - 1:
            _stop_cuda_profiler()
        return
    if _State.window is not None and k == SETTINGS["warmup"] + SETTINGS["profile_steps"] - 1:
        prof, _State.window = _State.window, None
        prof.step()  # the last recorded step: on_trace_ready exports
        prof.stop()


# --- steps --------------------------------------------------------------------------------------


def _claim(rule: str) -> bool:
    if SETTINGS["step_rule"] not in ("auto", rule):
        return False
    if _State.rule is None:
        _State.rule = rule
    return _State.rule == rule


def begin_step(rule: str, user_range: bool = False) -> None:
    """A step of ``rule`` begins (the open one, if any, ends first)."""
    if not _claim(rule):
        return
    if _State.open_range is not None:
        end_step(rule)
    k = _State.begun
    _State.begun += 1
    _on_begin(k)
    if user_range:
        _State.open_range = "user"
    else:
        _State.open_range = _State.torch.autograd.profiler.record_function(f"{STEP_RANGE}{k}")
        _State.open_range.__enter__()
    if _nvtx():
        _State.torch.cuda.nvtx.range_push(f"{STEP_RANGE}{k}")


def end_step(rule: str) -> None:
    """The open step of ``rule``, if any, ends."""
    if not _claim(rule) or _State.open_range is None:
        return
    if _nvtx():
        _State.torch.cuda.nvtx.range_pop()
    if _State.open_range != "user":
        _State.open_range.__exit__(None, None, None)
    _State.open_range = None
    _on_end(_State.begun - 1)


def diffusers_step_begins() -> None:
    if _State.open_range is None:
        begin_step("diffusers")


# --- hooks --------------------------------------------------------------------------------------


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``callback(module)`` right after the modules it matches finish importing."""

    def __init__(self, match):
        self.match = match  # name -> callback or None

    def find_spec(self, name, path, target=None):
        callback = self.match(name)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, callback)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, callback):
        self.loader, self.callback = loader, callback

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.callback(module)

    def __getattr__(self, name):  # get_resource_reader, is_package, get_source, ...
        return getattr(self.loader, name)


def _match(name: str):
    if name == "torch":
        return _on_torch
    if name.startswith("diffusers.schedulers.scheduling_"):
        return _wrap_schedulers
    if name.startswith(("diffusers.models.transformers.", "diffusers.models.unets.")):
        return _wrap_denoisers
    return None


def _classes(module, base_path: str, base_name: str):
    base = getattr(sys.modules.get(base_path), base_name, None)
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and base is not None
            and issubclass(value, base)
            and value.__module__ == module.__name__
        ):
            yield value


def _wrap_schedulers(module) -> None:
    for cls in _classes(module, "diffusers.schedulers.scheduling_utils", "SchedulerMixin"):
        if "step" in vars(cls):
            cls.step = _after(cls.step, lambda: end_step("diffusers"))


def _wrap_denoisers(module) -> None:
    # __call__, not forward: the module's own call (a frame in the trace) lies inside the step
    for cls in _classes(module, "diffusers.models.modeling_utils", "ModelMixin"):
        if "forward" in vars(cls):
            cls.__call__ = _before(cls.__call__, diffusers_step_begins)


def _after(fn, hook):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        hook()
        return out

    return wrapped


def _before(fn, hook):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        hook()
        return fn(*args, **kwargs)

    return wrapped


def _refuse_own_profiler(fn):
    """The program starting a profiler of its own: one process takes one profiler (CUPTI)."""

    def wrapped(self, *args, **kwargs):
        if not getattr(self, "_wanscope", False):
            _write_record({"error": OWN_PROFILER})
            os._exit(2)
        return fn(self, *args, **kwargs)

    return wrapped


def _hook_optimizers(optimizer) -> None:
    """A step boundary after each ``Optimizer.step`` returns, outside torch's own
    ``Optimizer.step#...`` range (its step post-hooks run inside it): ``_patch_step_function``
    wraps each optimizer class's ``step`` once, when its first instance is made, and we wrap that."""
    patch = getattr(optimizer, "_patch_step_function", None)
    if patch is None:  # a torch without it: the post-hook, inside torch's range
        optimizer_module = importlib.import_module("torch.optim.optimizer")
        optimizer_module.register_optimizer_step_post_hook(lambda *_: begin_step("optimizer"))
        return

    def patched(self):
        patch(self)
        cls = type(self)
        if not getattr(cls.step, "_wanscope", False):
            cls.step = _after(cls.step, lambda: begin_step("optimizer"))
            cls.step.hooked = True  # torch's mark: already wrapped, so it does not wrap ours again
            cls.step._wanscope = True

    optimizer._patch_step_function = patched


def _on_torch(torch) -> None:
    _State.torch = torch
    _State.top = os.environ.pop(TOP, None) is not None
    _hook_optimizers(torch.optim.Optimizer)
    profile = torch.profiler.profile
    profile.start = _refuse_own_profiler(profile.start)
    legacy = torch.autograd.profiler.profile
    legacy.__enter__ = _refuse_own_profiler(legacy.__enter__)
    record_function = torch.autograd.profiler.record_function
    enter, exit_ = record_function.__enter__, record_function.__exit__

    # the window opens before the program's step range and closes after it, so both ends are in it
    def rf_enter(self):
        if self.name.startswith(STEP_RANGE) and _State.open_range is None:
            begin_step("marker", user_range=True)
        return enter(self)

    def rf_exit(self, *exc):
        out = exit_(self, *exc)
        if self.name.startswith(STEP_RANGE) and _State.open_range == "user":
            end_step("marker")
        return out

    record_function.__enter__, record_function.__exit__ = rf_enter, rf_exit
    if threading.current_thread() is not threading.main_thread():
        # torch imported in a thread of the program: torch.profiler (and a signal handler)
        # start from the main thread alone; this process is not profiled
        _State.top = False
        _State.pid = None
        return
    if SETTINGS.get("memory_history"):
        _arm_memory_history()
    if _State.top and SETTINGS.get("delay") is not None:
        _arm_time_window()
    elif _State.top and not _cuda_profiler():
        _State.whole_run = _profiler(stacks=False)
        _State.whole_run.start()


# --- the time window of --step-rule none (--delay, --duration) ------------------------------------


def _signal():
    """The signal that brings the window's ends to the main thread (a profiler starts and stops
    only there): a real-time signal, which programs seldom use, where the system has them."""
    rtmin = getattr(signal, "SIGRTMIN", None)
    return signal.SIGALRM if rtmin is None else rtmin + 7


def _arm_time_window() -> None:
    """From ``delay`` seconds after the program started, for ``duration`` seconds of recording
    (to the end where null): a timer thread signals the main thread at each end, the second
    once the window is open."""
    delay, duration = SETTINGS["delay"], SETTINGS.get("duration")
    if not _cuda_profiler():
        # torch.profiler's start imports torch._inductor (a second or more): here, in the main
        # thread, so that the handler imports nothing (an import there, or in a thread beside
        # the program's own, can deadlock on the import locks) and the window opens on time
        try:
            importlib.import_module("torch._inductor")
        except Exception:  # noqa: BLE001 - the profiler's start will say what is wrong
            pass
    sig = _signal()
    main = threading.main_thread().ident
    opened = threading.Event()

    def handler(*_):
        try:  # it runs between two of the program's operations: nothing may escape into them
            if not opened.is_set():
                _open_time_window()
            else:
                _close_window()
        except Exception as e:  # noqa: BLE001
            print(f"wanscope: the time window failed: {e}", file=sys.stderr)
        if opened.is_set() or duration is None:
            signal.signal(sig, previous)
        opened.set()

    def timer():
        time.sleep(max(0.0, _State.started + delay - time.monotonic()))
        signal.pthread_kill(main, sig)
        if duration is not None:
            opened.wait()
            time.sleep(duration)
            signal.pthread_kill(main, sig)

    previous = signal.signal(sig, handler)
    threading.Thread(target=timer, name="wanscope-window", daemon=True).start()


def _open_time_window() -> None:
    if _cuda_profiler():
        _start_cuda_profiler()
    else:
        # no Python stacks: stopping torch.profiler's Python tracer from a signal handler, which
        # can run inside the tracer's own callback, hangs it
        _State.window = _profiler(stacks=False, on_trace_ready=_export)
        _State.window.start()


def _close_window() -> None:
    """The open window, if any, ends: cudaProfilerStop, or torch.profiler's stop, which hands a
    recording window to ``_export``."""
    if _State.window == "cuda_profiler":
        _stop_cuda_profiler()
    elif _State.window is not None:
        prof, _State.window = _State.window, None
        prof.stop()


# --- the allocator's history (--memory-history) ----------------------------------------------------


def _snapshot_name() -> str:
    rank = os.environ.get("RANK")
    return "memory_snapshot.pickle" if rank is None else f"memory_snapshot-rank{rank}.pickle"


def _arm_memory_history() -> None:
    """Start recording when the program initializes CUDA (``torch.cuda._lazy_call`` queues the
    call for then, or makes it now where CUDA is up already). The call must not raise: torch
    would fail the program's CUDA start-up."""
    torch, pid = _State.torch, os.getpid()

    def start():
        if os.getpid() != pid or _State.memory is not None:  # a forked child that starts CUDA
            return
        try:
            torch.cuda.memory._record_memory_history(
                enabled="all", context=MEMORY_CONTEXT, stacks=MEMORY_STACKS, max_entries=MEMORY_MAX_ENTRIES
            )
            _State.memory = "recording"
            torch._C._cuda_attach_out_of_memory_observer(_on_out_of_memory)
        except Exception as e:  # noqa: BLE001 - the program must run on
            print(f"wanscope: could not record the CUDA allocator's history: {e}", file=sys.stderr)

    torch.cuda._lazy_call(start)


def _on_out_of_memory(device, alloc, device_total, device_free) -> None:
    """The allocator's out-of-memory observer (called before it raises): dump at the first."""
    if _State.memory != "recording" or os.getpid() != _State.pid:
        return
    try:
        _dump_memory("oom")
        _State.memory = "oom"
    except Exception as e:  # noqa: BLE001 - the program's own error follows
        print(f"wanscope: could not write the memory snapshot: {e}", file=sys.stderr)


def _dump_memory(dumped: str, snapshot: dict | None = None) -> None:
    """Write the allocator's snapshot through a temporary name (``dumped``: ``oom``, ``exit``)."""
    torch = _State.torch
    if snapshot is None:
        snapshot = torch.cuda.memory._snapshot()
    snapshot[RECORDING_KEY] = {
        "max_entries": MEMORY_MAX_ENTRIES,
        "context": MEMORY_CONTEXT,
        "stacks": MEMORY_STACKS,
        "dumped": dumped,
        "torch": str(torch.__version__),  # a str subclass of torch's: pickled, it would name its class
    }
    name = _snapshot_name()

    def dump(path):
        with open(path, "wb") as f:
            pickle.dump(snapshot, f)

    _write_through_partial(name, dump)
    _State.snapshot_written = name


def _dump_memory_at_exit() -> None:
    """The snapshot at exit, unless the one of an out-of-memory error holds what this one lost
    (its out-of-memory event, dropped from the ring buffer since)."""
    if _State.memory is None:
        return
    try:
        snapshot = _State.torch.cuda.memory._snapshot()
        kept_oom = any(e.get("action") == "oom" for trace in snapshot.get("device_traces", []) for e in trace)
        if _State.memory != "oom" or kept_oom:
            _dump_memory("exit", snapshot)
    except Exception as e:  # noqa: BLE001 - the program's exit must not fail on our account
        print(f"wanscope: could not write the memory snapshot: {e}", file=sys.stderr)


def _write_record(extra: dict) -> None:
    torch = _State.torch
    cuda = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    record = {
        "pid": os.getpid(),
        "rank": os.environ.get("RANK"),
        "top": _State.top,
        "step_rule": _State.rule,
        "steps": _State.begun,
        "trace": _State.trace_written,
        "python": sys.version.split()[0],
        "torch": None if torch is None else torch.__version__,
        "cuda": None if torch is None else torch.version.cuda,
        "gpu": torch.cuda.get_device_name(torch.cuda.current_device()) if cuda else None,
        "time_ns": time.time_ns(),
        "memory_snapshot": _State.snapshot_written,
        **extra,
    }
    path = _trace_path(f".boot-{os.getpid()}.json")
    with open(path + ".partial", "w") as f:
        json.dump(record, f)
    os.replace(path + ".partial", path)


def _at_exit() -> None:
    """The program ends: a window still open writes what it recorded (torch.profiler's stop
    hands a recording window to ``_export``); the top process writes its whole-run recording
    where no step came and no rank wrote a trace."""
    if _State.torch is None or os.getpid() != _State.pid:  # a forked worker: its parent's state
        return
    whole_run, _State.whole_run = _State.whole_run, None
    try:
        _close_window()
        if whole_run is not None:
            whole_run.stop()
            if not any(n.startswith("trace-rank") for n in os.listdir(SETTINGS["out"])):
                _export(whole_run)
    except Exception as e:  # noqa: BLE001 - the program's exit must not fail on our account
        print(f"wanscope: could not write the trace: {e}", file=sys.stderr)
    _dump_memory_at_exit()
    if _State.trace_written or _State.top or _State.snapshot_written:
        _write_record({})


def install() -> None:
    """Hook the imports of torch and diffusers (the program has imported neither yet), in the
    processes that may be profiled: each that can still become the top one (``_on_torch``) and,
    under torchrun, each rank (not the launcher's other children, such as DataLoader workers)."""
    if TOP not in os.environ and "RANK" not in os.environ:
        return
    _State.pid = os.getpid()
    _State.started = time.monotonic()
    sys.meta_path.insert(0, _AfterImport(_match))
    atexit.register(_at_exit)
