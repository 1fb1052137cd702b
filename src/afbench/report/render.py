"""Render the summary with Jinja2 into report.md and report.html, and write the tables.

Templates: ``report.md.j2`` and ``report.html.j2`` from ``report.template_dir`` when set (a
user's own, given in the config composed now or on the re-render's command line: never one
an output directory names), else the shipped ``templates/``; a user's folder renders in
Jinja2's sandbox (:func:`environment`). They get ``s`` (the :class:`afbench.store.Summary`;
its attributes, e.g. ``s.comparisons[0].variant.mean_step_s``) and ``L`` (the labels of
``report.lang`` from ``templates/labels.yaml``); the HTML template also gets ``plots``
(:func:`afbench.report.plots.report_plots`: inline SVG figures, or notes).
"""

from __future__ import annotations

import math
import os
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.sandbox

from afbench import messages
from afbench.compare.glance import flags as glance_flags
from afbench.config.models import ReportConfig
from afbench.errors import OutputError
from afbench.io import inside, write_bytes_atomic, write_text_atomic
from afbench.store import SUMMARY, SUMMARY_FILE, OutDir, Summary, SweepSummary, load_summary

if TYPE_CHECKING:
    import pandas as pd

TEMPLATES = Path(__file__).parent / "templates"


def report_name(stem: str, fmt: str, lang: str, run_lang: str | None) -> str:
    """File name of a rendered report: ``<stem>.<fmt>`` (``report.md``, ``sweep_report.html``)
    in the language the experiment ran with (``run_lang``, its ``report.lang``; ``None``:
    the same as ``lang``), ``<stem>.<lang>.<fmt>`` (``report.zh.md``) for a re-render in
    another language, beside it: a re-render never overwrites the run's own report, and
    links to ``report.html`` keep pointing at it."""
    return f"{stem}.{fmt}" if run_lang in (None, lang) else f"{stem}.{lang}.{fmt}"


def run_language(out_dir: Path) -> str:
    """The ``report.lang`` an output directory (or a sweep job) ran with, from its
    experiment.json; ``"en"`` when it does not say."""
    try:
        exp = OutDir(Path(out_dir)).experiment()
    except OutputError:
        return "en"
    return exp.report.lang or "en"


def stored_report(out_dir: Path) -> ReportConfig:
    """The ``report`` settings an output directory (or a sweep job) ran with, from its
    experiment.json, with ``template_dir`` cleared: templates come from the installed package
    and from a folder the user names now, never from a file of a received directory.
    Raises OutputError naming experiment.json and the key when it does not fit."""
    return OutDir(Path(out_dir)).experiment().report.model_copy(update={"template_dir": None})


def _fmt(value: Any, spec: str = ".4f", none: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _pct(value: Any, spec: str = "+.2f") -> str:
    """A percentage with its sign and unit, or ``n/a`` (never ``n/a%``)."""
    text = _fmt(value, spec)
    return text if text == "n/a" else text + "%"


def _contention(row: Any, L: dict[str, str]) -> str:
    """The runs table's contention cell of a run row (:class:`afbench.store.RunRow`): its
    measures and the decision in the report's words, e.g. ``CPU wait 34%, CPU pressure 100%,
    steal 0%, CPU/wall 0.52 of 2 threads: contended``; ``n/a`` when not measured. A replaced
    run (or a rerun) names the other run."""
    get = (lambda k: row.get(k)) if isinstance(row, dict) else (lambda k: getattr(row, k, None))
    parts = []
    for key, label, spec in (
        ("run_queue_wait_pct", "cont_wait", ".0f"),
        ("cpu_pressure_pct", "cont_pressure", ".0f"),
        ("steal_pct", "cont_steal", ".0f"),
    ):
        if get(key) is not None:
            parts.append(f"{L[label]} {_fmt(get(key), spec)}%")
    if get("cpu_per_wall") is not None:
        threads = get("threads")
        parts.append(
            f"CPU/wall {_fmt(get('cpu_per_wall'), '.2f')}"
            + (f" {L['cont_of']} {threads} {L['cont_threads']}" if threads else "")
        )
    contended = get("contended")
    text = ", ".join(parts) or "n/a"
    if contended is not None:
        again = contended and get("rerun_of")  # a rerun of a contended run, contended too
        text += f": {L['contended_again' if again else 'contended'] if contended else L['not_contended']}"
    if get("contention_scope") == "run":
        text += f" ({L['cont_whole_run']})"
    if get("replaced_by"):
        text += f"; {L['replaced_by']} {get('replaced_by')}"
    if get("rerun_of"):
        text += f"; {L['rerun_of']} {get('rerun_of')}"
    return text


def labels(lang: str) -> dict[str, str]:
    """Report labels for ``lang`` (English ones fill any key a language lacks):
    :func:`afbench.messages.labels`."""
    return messages.labels(lang)


@jinja2.pass_context
def _say(context: Any, message: Any) -> str:
    """The ``say`` filter: a :class:`afbench.messages.Message` (or its JSON dict) in the
    template's language (its ``L``); a plain string as it is; ``""`` for none."""
    return messages.render(message, context["L"])


@jinja2.pass_context
def _fill(context: Any, template: str, **args: Any) -> str:
    """The ``fill`` filter: ``{{ L.key | fill(n=3) }}`` fills the label's ``{n}`` fields
    (``str.format`` rules, so ``{gain:+.2f}`` formats a number). In the sandbox a field may
    name an argument only (``{n.__init__}`` would reach past it): SecurityError."""
    if context.environment.sandboxed:
        _plain_fields(template)
    return messages.fill(template, context["L"], **args)


def _plain_fields(template: str) -> None:
    """Raises jinja2's SecurityError when a ``str.format`` field of ``template`` (or of a
    format spec inside it) is more than a name: an attribute or item of an argument."""
    for _, field, spec, _ in string.Formatter().parse(template):
        if field is not None and not (field.isidentifier() or field.isdigit() or field == ""):
            raise jinja2.exceptions.SecurityError(f"fill: field {{{field}}} is not a plain name")
        if spec:
            _plain_fields(spec)


def _bytecode_cache(name: str = "jinja") -> jinja2.BytecodeCache | None:
    """Compiled templates kept between invocations: jinja2's FileSystemBytecodeCache (keyed by
    each template's name and source checksum, so an edited or user template recompiles;
    written atomically, so parallel sweep jobs can share it), which saves the two reports'
    compile time, about 0.45 s, on every invocation after the first. In
    ``$AFBENCH_CACHE_DIR/jinja``, else ``$XDG_CACHE_HOME/afbench/jinja``, else
    ``~/.cache/afbench/jinja`` (created with mode 0700); ``None`` (compile every time) when
    that folder cannot be created or written, or when ``AFBENCH_CACHE_DIR`` is empty.
    ``name``: the cache's folder (the sandbox compiles to its own, ``jinja-sandbox``)."""
    root = os.environ.get("AFBENCH_CACHE_DIR")
    if root == "":
        return None
    if root is None:
        root = os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "afbench"
        )
    folder = Path(root) / name
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))


class _Sandbox(jinja2.sandbox.SandboxedEnvironment):
    """Jinja2's sandbox (no ``_`` attributes, no unsafe callables), with the
    ImmutableSandboxedEnvironment's rule for every mutable but a list: the shipped
    verdict_words.j2, which a user's templates import, builds its sentences with
    ``list.append``; the labels ``L`` and the summary's dicts stay unchangeable."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        return super().is_safe_attribute(obj, attr, value) and (
            isinstance(obj, list) or not jinja2.sandbox.modifies_known_mutable(obj, attr)
        )


def environment(template_dir: str | None) -> jinja2.Environment:
    """The Jinja2 environment of the reports: the shipped ``templates/`` only (a plain
    Environment), or, with ``template_dir`` (a user's folder, searched first), a sandboxed one
    (:class:`_Sandbox`, compiled into its own bytecode cache): a template there can read what
    it is given, never call into Python or change it.

    Raises ConfigError naming ``report.template_dir`` when it is not a folder."""
    loaders: list[jinja2.BaseLoader] = []
    if template_dir:
        folder = Path(template_dir)
        if not folder.is_dir():
            from afbench.errors import ConfigError  # only on this error path

            raise ConfigError(f"report.template_dir: {folder} is not a folder")
        loaders.append(jinja2.FileSystemLoader(str(folder)))
    loaders.append(jinja2.FileSystemLoader(str(TEMPLATES)))
    # Shared parts (``_*.j2``, imported by the HTML templates) escape what they print, so
    # their macros return safe markup; the page templates keep their own autoescape blocks.
    kind = _Sandbox if template_dir else jinja2.Environment
    env = kind(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        bytecode_cache=_bytecode_cache("jinja-sandbox" if template_dir else "jinja"),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=lambda name: Path(name or "").name.startswith("_"),
    )
    env.filters["fmt"] = _fmt
    env.filters["pct"] = _pct
    # a Markdown table cell: no pipe or newline may break the row
    env.filters["cell"] = lambda v: " ".join(str(v or "").split()).replace("|", "\\|")
    env.filters["short"] = lambda h, n=16: (h or "n/a")[:n]
    env.filters["contention"] = _contention
    env.filters["say"] = _say
    env.filters["fill"] = _fill
    env.filters["flags"] = glance_flags  # the headline's flags, chosen in Python
    return env


def verdict_words(lang: str = "en", template_dir: str | None = None) -> Any:
    """The macros of templates/verdict_words.j2 bound to the labels of ``lang``:
    ``verdict_line(c)``, ``speed_note(speed)``, ``headline(c)``, ``method_sentence(cs)``."""
    return _fill_template(
        environment(template_dir), "verdict_words.j2", {"L": labels(lang)}, module=True
    )


def fill_lines(summary: Summary, report: ReportConfig) -> Summary:
    """Word each comparison's verdict line and the summary's headline (the log's closing
    lines) in ``report.lang``, from templates/verdict_words.j2: the sentences of a verdict are
    written there and nowhere else. Returns ``summary``, changed in place."""
    module = verdict_words(report.lang, report.template_dir)
    try:
        for c in summary.comparisons:
            c.verdict_line = str(module.verdict_line(c))
        summary.headline = [str(module.headline(c, glance_flags(c))) for c in summary.comparisons]
    except jinja2.TemplateError as exc:  # a macro of a user's verdict_words.j2, sandboxed
        if not report.template_dir:
            raise
        from afbench.errors import ConfigError  # only on this error path

        raise ConfigError(
            f"report.template_dir: verdict_words.j2: {type(exc).__name__}: {exc}"
        ) from None
    summary.headline += [
        f"{labels(report.lang)['profiling']} {p.variant}: {p.status}" for p in summary.profiling
    ]
    return summary


def _fill_template(
    env: jinja2.Environment, name: str, context: dict[str, Any], module: bool = False
) -> Any:
    """Template ``name`` rendered with ``context`` (``module``: its macros, bound to it).
    Raises ConfigError naming ``report.template_dir`` and the template when a sandboxed
    (user's) template does what the sandbox refuses or fails to render: one line, not a
    traceback."""
    try:
        template = env.get_template(name)
        return template.make_module(context) if module else template.render(**context)
    except jinja2.TemplateError as exc:
        if not env.sandboxed:
            raise
        from afbench.errors import ConfigError  # only on this error path

        raise ConfigError(f"report.template_dir: {name}: {type(exc).__name__}: {exc}") from None


def console_lines(
    summary: Summary, lang: str = "en", verbose: bool = False, template_dir: str | None = None
) -> list[str]:
    """The lines the console ends with: the summary's headline (one line a comparison, at most
    about 120 characters, then the profiling statuses); with ``verbose`` (``--verbose``, the
    config key ``verbose=true``) each comparison's "Why" (templates/verdict_words.j2 ``why``:
    interval and MDE, rounds set aside and why, what more rounds would decide, the
    reference's quick verdict, caveats, a failed run's reason) indented under its headline;
    ``template_dir``: a user's verdict_words.j2, as :func:`fill_lines` uses it."""
    module = verdict_words(lang, template_dir) if verbose else None
    why = labels(lang)["why"]
    out = []
    for i, line in enumerate(summary.headline):
        out.append(line)
        if module is not None and i < len(summary.comparisons):
            out.append(f"  {why}: {module.why(summary.comparisons[i])}")
    return out


def render(
    summary: Summary | dict[str, Any],
    out_dir: Path,
    report: ReportConfig,
    run_lang: str | None = None,
) -> list[Path]:
    """Render ``report.md`` / ``report.html`` (per ``report.formats``) atomically into out_dir
    (named by :func:`report_name`: ``report.<lang>.md`` when ``report.lang`` is not
    ``run_lang``). ``summary``: a Summary, or summary.json's content of any schema version
    (:func:`afbench.store.load_summary`). The HTML's step-time plot reads
    ``out_dir/results/steps.parquet`` when it exists."""
    return _render(load_summary(summary), Path(out_dir), report, steps=None, run_lang=run_lang)


def _steps_table(out_dir: Path) -> pd.DataFrame | None:
    path = out_dir / "results" / "steps.parquet"
    if not path.is_file():
        return None
    import pandas as pd  # 0.5 s, for the HTML step plot only

    return pd.read_parquet(path)


def _render(
    summary: Summary,
    out_dir: Path,
    report: ReportConfig,
    steps: pd.DataFrame | None,
    run_lang: str | None = None,
) -> list[Path]:
    env = environment(report.template_dir)
    L = labels(report.lang)
    written = []
    for fmt in report.formats:
        context: dict[str, Any] = {"s": summary, "L": L}
        if fmt == "html":
            from afbench.report.plots import report_plots  # matplotlib: HTML only

            context["plots"] = report_plots(
                summary, steps if steps is not None else _steps_table(out_dir), L
            )
        path = out_dir / report_name("report", fmt, report.lang, run_lang)
        write_text_atomic(path, _fill_template(env, f"report.{fmt}.j2", context))
        written.append(path)
    return written


def render_sweep(
    summary: SweepSummary,
    sweep_dir: Path,
    report: ReportConfig,
    steps: list[pd.DataFrame] | None = None,
    run_lang: str | None = None,
) -> list[Path]:
    """Render ``sweep_report.md`` / ``sweep_report.html`` (per ``report.formats``, in
    ``report.lang``, with ``sweep.{md,html}.j2`` from ``report.template_dir`` where it has
    them) atomically into ``sweep_dir``; ``sweep_report.<lang>.md`` when ``report.lang`` is
    not the jobs' own ``run_lang`` (:func:`report_name`). Templates get ``s`` (the
    :class:`afbench.store.SweepSummary`) and ``L``; the HTML one also ``plots``
    (:func:`afbench.report.sweep_plots.sweep_plots`), drawn from ``steps``: the combinations'
    verdict-phase step tables, each with a ``combination`` column.

    Raises ConfigError naming ``report.template_dir`` when it is not a folder."""
    env = environment(report.template_dir)
    L = labels(report.lang)
    written = []
    for fmt in report.formats:
        context: dict[str, Any] = {"s": summary, "L": L}
        if fmt == "html":
            # pandas and matplotlib only for the HTML figures
            import pandas as pd

            # (plots imports matplotlib at module level)
            from afbench.report.sweep_plots import sweep_plots

            frames = [f for f in steps or [] if len(f)]
            context["plots"] = sweep_plots(
                summary, pd.concat(frames, ignore_index=True) if frames else None, L
            )
        path = Path(sweep_dir) / report_name("sweep_report", fmt, report.lang, run_lang)
        write_text_atomic(path, _fill_template(env, f"sweep.{fmt}.j2", context))
        written.append(path)
    return written


def build_report(out_dir: Path, report: ReportConfig | None = None) -> Summary:
    """Collect ``out_dir``, compare, write tables (results/*.parquet + .csv), summary.json and
    the rendered report; returns the summary. Works offline on any existing (also partial)
    output directory, of any schema version. The report is ``report.md`` / ``report.html``
    in the language the directory ran with, ``report.<lang>.md`` / ``.html`` beside them in
    another (:func:`report_name`). ``report`` None: the directory's own settings from its
    experiment.json, less its ``template_dir`` (a stored folder name is never rendered
    from: :func:`stored_report`).

    Raises OutputError, before writing anything, when ``results`` leads out of ``out_dir``
    through a symlink (:func:`afbench.io.inside`) or summary.json is of a newer schema."""
    # the layers below load only when a report is built, not when templates are rendered
    from afbench.collect import collect
    from afbench.compare import compare

    out_dir = Path(out_dir).resolve()
    if report is None:
        report = stored_report(out_dir)
    # before anything is written: a results -> /elsewhere link, a summary of a newer afbench
    tables = inside(out_dir / "results", out_dir)
    SUMMARY_FILE.refuse_newer(out_dir / SUMMARY)
    col = collect(out_dir)
    tables.mkdir(exist_ok=True)
    for name, df in (("runs", col.runs), ("steps", col.steps), ("kernels", col.kernels)):
        write_bytes_atomic(tables / f"{name}.parquet", df.to_parquet(index=False))
        write_text_atomic(tables / f"{name}.csv", df.to_csv(index=False))
    # summary.json's verdict lines and headline are in the directory's own language; a
    # re-render in another language changes only its report.<lang>.* files
    summary = fill_lines(
        compare(col, report), report.model_copy(update={"lang": run_language(out_dir)})
    )
    SUMMARY_FILE.write(out_dir / SUMMARY, summary)
    _render(summary, out_dir, report, steps=col.steps, run_lang=run_language(out_dir))
    return summary
