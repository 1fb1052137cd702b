"""The command line's overrides as users type them: what Hydra's grammar would reject or run as
something else, said in one line per problem with the form that works.

Hydra's override grammar (``hydra.core.override_parser``, public API) parses each override;
these functions only add the advice Hydra's own messages lack (Hydra issues 1577, 938, 1897,
3018): a value holding ``=``, a bare ``{`` in a list, a comma value without ``-m``, a key of a
free-form map (``launcher.env.NAME=...``, ``engine.env.NAME=...``) that Hydra would want a ``+``
for.
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

# Hydra flags that take a value (the value is not an override).
VALUE_FLAGS = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
    "--info",
    "-i",
}
HELP_FLAGS = ("--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc")
# Maps whose keys are the user's own (environment variables, compiler options, variants and
# phases with the keys inside them): every ``dict[str, ...]`` field of the config schemas
# (tests/test_cli_errors.py derives them from the models and holds this list to them; listed
# here so that a command line Hydra rejects never loads pydantic). A new key needs no ``+``
# there: afbench passes them to Hydra as ``++key=value`` (add or replace).
FREE_FORM_MAPS = (
    "launcher.env",
    "engine.env",
    "optimization.compile.options",
    "optimization.npugraph_ex_options",
    "experiment.variants",
    "experiment.phases",
)
# Keys whose value is one string holding commas (never a sweep over its items).
ONE_STRING_KEYS = ("report.sweep_baseline",)


def user_overrides(argv: list[str]) -> list[str] | None:
    """The ``key=value`` overrides of a command line, Hydra's own (``hydra.*``) left out; None
    when Hydra prints help or info instead of running."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in HELP_FLAGS:
            return None
        if arg in VALUE_FLAGS:
            skip = True
            continue
        if arg.startswith("-") or "=" not in arg:
            continue
        if arg.lstrip("+~").startswith(("hydra.", "hydra/")):
            continue
        out.append(arg)
    return out


def is_multirun(argv: list[str]) -> bool:
    return any(a in ("-m", "--multirun") for a in argv) or any(
        a.replace(" ", "").lower() == "hydra.mode=multirun" for a in argv
    )


def free_form_argv(argv: list[str]) -> list[str]:
    """``argv`` with every ``<free-form map>.<name>[.<more>]=value`` written ``++...`` (add or
    replace), so ``launcher.env.HF_HOME=/data``, ``engine.env.SLOW=1`` or
    ``experiment.variants.af_on.scheduler.steps=20`` need no ``+`` and work whether the key
    exists or not; ``+``/``++``/``~`` forms are passed as written (:data:`FREE_FORM_MAPS`)."""
    out = []
    for arg in argv:
        key = arg.partition("=")[0]
        if (
            "=" in arg
            and not arg.startswith(("+", "~", "-"))
            and any(key.startswith(m + ".") for m in FREE_FORM_MAPS)
        ):
            arg = "++" + arg
        out.append(arg)
    return out


def _split_top(value: str) -> list[str]:
    """``value`` split at the commas outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, "", ""
    for ch in value:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    return parts + [cur]


def _quoted(item: str) -> str:
    item = item.strip()
    return item if item[:1] in "'\"" else f"'{item}'"


def _equals_hint(key: str, value: str, multirun: bool) -> str:
    items = _split_top(value) if multirun and key not in ONE_STRING_KEYS else [value]
    hydra_value = ",".join(f'"{v}"' for v in items)
    kind = f"a sweep over {len(items)} values" if len(items) > 1 else "one value"
    return (
        f"{key}: the value {value!r} contains '=', which Hydra's override grammar reads as "
        f"a second key; quote each value for Hydra, inside quotes for the shell "
        f"({kind}): '{key}={hydra_value}'"
    )


def _brace_hint(key: str, value: str) -> str:
    if value.startswith("[") and value.endswith("]"):
        fixed = "[" + ",".join(_quoted(v) for v in _split_top(value[1:-1])) + "]"
    else:
        fixed = _quoted(value)
    return (
        f"{key}: Hydra's override grammar reads a bare '{{' as the start of a mapping; quote "
        f'each placeholder for Hydra, inside double quotes for the shell: "{key}={fixed}"'
    )


def override_problems(argv: list[str], overrides: list[str]) -> list[str]:
    """One line per override that Hydra's grammar rejects with a bare parser message or would
    run as something else: a value holding ``=`` (``epoch=3-step=1200.ckpt``), a bare ``{``
    (``engine.args=[{steps}]``), an unquoted non-ASCII value (``model.path=/data/模型``), any
    other grammar error (Hydra's message with the key), and a
    comma value without ``-m``. Empty when every override is fine."""
    parser = OverridesParser.create()
    multirun = is_multirun(argv)
    problems = []
    for line in overrides:
        key, _, value = line.partition("=")
        key = key.lstrip("+~")
        try:
            (parsed,) = parser.parse_overrides([line])
        except OverrideParseException as exc:
            if "=" in value:
                problems.append(_equals_hint(key, value, multirun))
            elif "{" in value and "'{" not in value and '"{' not in value:
                problems.append(_brace_hint(key, value))
            elif not value.isascii() and value[:1] not in "'\"[":
                # Hydra's unquoted values are ASCII only (a path in Chinese, an accent)
                problems.append(
                    f"{key}: Hydra's override grammar reads only ASCII in an "
                    f"unquoted value; quote the value for Hydra, inside single "
                    f"quotes for the shell: '{key}=\"{value}\"'"
                )
            else:
                problems.append(f"{key}: {' '.join(str(exc).split())}")
            continue
        if parsed.is_sweep_override() and not multirun:
            n = len(list(parsed.sweep_string_iterator()))
            problems.append(
                f"{key}: '{value}' is a sweep over {n} values, which needs -m "
                f"(python -m afbench -m '{line}'); for a list write '{key}=[{value}]',"
                f" for a string '{key}=\"{value}\"'"
            )
    return problems


def parses(line: str) -> bool:
    """Whether Hydra's override grammar accepts ``line``."""
    try:
        OverridesParser.create().parse_overrides([line])
    except OverrideParseException:
        return False
    return True


def sweep_values(overrides: list[str]) -> dict[str, tuple[list[str], str]]:
    """Swept key (no ``+``) -> (its values as Hydra writes them, the text as typed)."""
    out = {}
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_sweep_override():
            out[o.get_key_element().lstrip("+~")] = (
                list(o.sweep_string_iterator()),
                o.input_line.partition("=")[2],
            )
    return out


def combinations_to_check(overrides: list[str]) -> list[list[str]]:
    """Override lists that together try every value of every swept key once (the other swept
    keys at their first value): enough to catch any bad value without running the product."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    values = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [o.input_line]
        for o in parsed
    ]
    first = [v[0] for v in values]
    out = [first]
    for i, vals in enumerate(values):
        for v in vals[1:]:
            out.append(first[:i] + [v] + first[i + 1 :])
    return out


def single_run_overrides(argv: list[str]) -> list[str] | None:
    """The overrides of a command line that runs one job and nothing else (every argument an
    override, none a sweep, no ``hydra.mode``), or None (flags, ``-m``, help: Hydra's own
    command line handles those)."""
    if any(a.startswith("-") or "=" not in a for a in argv):
        return None
    if any(a.lstrip("+~").replace(" ", "").startswith("hydra.mode") for a in argv):
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(argv)
    except OverrideParseException:
        return None  # precheck gives the one-line message
    if any(o.is_sweep_override() for o in parsed):
        return None
    return list(argv)
