"""``wanscope profile``: run Wan2.1 denoising steps, or anyone's PyTorch program, under a profiler
and report what limits them.

Modules: ``options`` (what a run does, its defaults and checks), ``window`` (the profiled
steps: torch.profiler with a schedule, or cudaProfilerStart/Stop for Nsight Systems),
``driver`` (the stages: text encoding, warm-up and profiled steps, VAE decode),
``run_info`` (the ``run`` object of report.json),
``nsys`` (the same run re-executed under Nsight Systems), ``ncu`` (Nsight Compute on the
self-attention kernel), ``result`` (analysis, report files, terminal summary), ``cli``;
for a COMMAND: ``command`` (running it, its ``run`` object and notes), ``bootstrap/`` (what runs
inside the program: steps and torch.profiler, standard library and torch only), ``marker``
(``wanscope.step()``).
"""
