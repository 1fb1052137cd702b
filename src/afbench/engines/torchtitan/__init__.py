"""The torchtitan engine: afbench's run config as a torchtitan / torchtitan-npu command line,
and torchtitan's console log, structured logs and profiler traces read back as afbench records.

Everything up to the process boundary is pure and testable on a CPU-only machine (torchtitan
itself does not run there as shipped, docs/reference.md §7; ``cpu_entry`` runs its trainer on
a CPU, "torchtitan on CPU: SDPA attention, inductor C++"): :func:`build_command` turns a RunSpec
into an argv list and environment, the parsers read torchtitan's outputs, and
:func:`run_torchtitan` starts the process, streams its output, writes ``metrics.jsonl`` and
prints afbench's reference step line so the strict verdict parser
(:mod:`afbench.analysis.steplog`) applies unchanged. ``qwen3`` is afbench's torchtitan config
function (the model of ``model.path``, sized by ``hf_model`` from its config.json; imported only
by the torchtitan process), and ``probe`` is the preflight that has the installed torchtitan
parse every planned command line.

Formats, as written by torchtitan 0.3.0 (PyPI wheel) and torchtitan-npu (master):

* Config: ``torchrun ... -m torchtitan.train --module M --config C [--section.key value ...]``,
  parsed by tyro (``torchtitan/config/manager.py``). Booleans are flags: ``--compile.enable`` /
  ``--compile.no-enable``. Options that follow a tyro subcommand token (the reference's
  ``dataloader:chat-data-loader-config``) are applied to that subcommand only, so every
  trainer-level option has to come before it.
* Step line (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``)::

      step: {step:2}  loss: {loss:8.5f}  grad_norm: {gn:7.4f}  memory: {gib:5.2f}GiB({pct:.2f}%)
      tps: {round(tps):,}  tflops: {tflops:,.2f}  mfu: {mfu:.2f}% | N/A

  on one line, each field preceded by an ANSI colour unless ``--metrics.disable_color_printing``,
  behind the logger header ``[titan] <asctime> - root - INFO - `` and, under torchrun's
  ``--tee``, the header ``[rank<local_rank>]:``. ``tps`` is tokens per second *per device*
  (tokens since the last log / (seconds x non-data-parallel size)); ``tflops`` is per device
  too. torchtitan-npu patches this line (``torchtitan_npu/patches/tools/metrics.py``) to end
  with ``elapsed_time_per_step: {s:.3f}s`` (seconds between two logs / log_freq).
  ``validate step: N ...`` lines are validation, not training steps.
* Structured logs (``torchtitan/observability/structured_logger/``, on by default via
  ``debug.enable_structured_logging``): one JSON object per line in
  ``<dump>/structured_logs/<source>.global_rank_<rank>.<YYYYmmdd-HHMMSS>-<6 chars>.jsonl``; the
  training loop wraps every step in a span ``step``, whose closing record has
  ``"log_type_name": "step_end"``, ``"step": N`` and ``"value"`` = the span's wall time in ms
  (a failing step also gets a ``step_error`` record).
* Profiler traces (``torchtitan/tools/profiler.py``):
  ``<save_traces_folder>/iteration_<step>/[<leaf>/]rank<rank>_trace.json.gz`` (chrome trace,
  gzip), one folder per profiling cycle, named by the last step it recorded. torchtitan-npu's
  ``--profiling.*`` writes torch_npu's ``*_ascend_pt/ASCEND_PROFILER_OUTPUT`` tree instead.
"""
