"""Conformance of every torch_npu / torchair / inductor_npu_ext name afbench uses against the
released torch_npu wheels, read without an NPU.

    .venv/bin/python bench/npu_api_conformance.py [--offline]

1. Scans ``src/afbench`` with ``ast`` (:func:`scan_calls`): attribute chains rooted at
   ``torch_npu`` (also ``self.torch_npu`` and local aliases such as ``prof = ...profiler``),
   ``torch.npu.*`` (torch_npu's device module), ``torch.compile(backend=<torch_npu backend>)``,
   the inductor option ``npu_backend``, the process-group backend ``"hccl"``, and imports of
   ``torch_npu`` / ``torchair`` / ``inductor_npu_ext`` by name. Each use becomes one key:
   the name and the parameter names afbench passes.
2. Downloads each wheel of :data:`WHEELS` with ``pip download --no-deps`` (manylinux x86_64,
   CPython 3.11) into ``bench/.wheels/`` (gitignored; ``--offline`` uses only that cache).
3. Reads the wheel as a zip: its ``entry_points.txt`` and the ``ast`` of its Python sources
   (signatures, class members, meta registrations of ops). The C extension is never imported.
4. Writes ``bench/results/npu_api_conformance.txt``: per wheel, one line per key,
   ``<key> | ok | <evidence>`` or ``<key> | WRONG: ... `` / ``UNVERIFIED: ...``.

``tests/test_npu_api_conformance.py`` scans the source the same way (no network) and fails
when a key is missing from the committed result file, or is not ``ok`` for the released wheel.
Names that are C-extension objects (``ProfilerActivity``, the ops themselves) are checked
through what the wheel's Python says about them (meta registrations, its own uses).
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import hashlib
import subprocess
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

from _npu_scan import NPU_DYNAMO_BACKENDS, scan_calls
from _npu_wheel import Wheel, check_params, defined, sig_text, signature

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
CACHE = BENCH_DIR / ".wheels"
RESULT = BENCH_DIR / "results" / "npu_api_conformance.txt"

#: (pip requirement, label). The first is the release afbench targets; every call must be ok.
WHEELS = (
    ("torch-npu==2.14.0", "released"),
    ("torch-npu==2.12.0rc1", "the reference's pin (torch 2.12.0)"),
)
PLATFORM, PYTHON_VERSION = "manylinux_2_28_x86_64", "3.11"


# ------------------------------------------------------------------------------ the checks

#: How afbench calls the ops it only references (backends/npu.py returns them; the converters
#: call them): positional arguments passed, results used.
OP_CALLS = {
    "torch_npu.npu_add_rms_norm": (
        4,
        3,
        "switches/converters.py: op(residual, hidden_states, "
        "weight, eps) -> (y, rstd, x), 3 results unpacked",
    ),
    "torch_npu.npu_rms_norm": (
        3,
        2,
        "switches/converters.py FusedRMSNorm: op(x, weight, eps)[0] of (y, rstd)",
    ),
}
#: A call's ``**name`` argument: the keywords it holds (afbench computes them).
STARSTAR = {
    "**args": ("wait", "warmup", "active", "repeat")
}  # switches/step_profiler.schedule_args


@dataclass(frozen=True)
class Result:
    status: str  # "ok", "WRONG: ...", "UNVERIFIED: ..."
    evidence: str


def _split(key: str) -> tuple[str, int, list[str]] | None:
    """``name(<2 positional>, a=, **b)`` -> (name, 2, [a, b's keys]); None for a bare name."""
    if not key.endswith(")") or "(" not in key:
        return None
    name, _, inner = key[:-1].partition("(")
    positional, keywords = 0, []
    for p in filter(None, (x.strip() for x in inner.split(","))):
        if p.startswith("<"):
            positional = int(p[1:].split()[0])
        elif p.startswith("**"):
            keywords += list(STARSTAR.get(p, ()))
        else:
            keywords.append(p.rstrip("="))
    return name, positional, keywords


def _wheel_name(name: str) -> str:
    # torch_npu sets torch.npu = torch_npu.npu (its device module)
    return (
        "torch_npu.npu." + name.removeprefix("torch.npu.")
        if name.startswith("torch.npu.")
        else name
    )


def _loc(module: str, node: ast.AST) -> str:
    return f"{module}:{getattr(node, 'lineno', '?')}"


def _uses_attr(wheel: Wheel, owner: str, attr: str) -> str | None:
    """A file of the wheel whose Python reads ``<owner>.<attr>`` (C-extension enums)."""
    for f, tree in wheel.sources():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == attr
                and ast.unparse(node.value).endswith(owner)
            ):
                return f"{f}:{node.lineno}"
    return None


def _find_call(wheel: Wheel, func_suffix: str, first_arg: str) -> str | None:
    for f, tree in wheel.sources():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith(func_suffix)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == first_arg
            ):
                return f"{f}:{node.lineno}"
    return None


def _meta(wheel: Wheel, op: str) -> tuple[str, ast.FunctionDef] | None:
    """The meta registration ``@impl(m, "<op>")`` of a torch_npu op (gives its signature)."""
    for f, tree in wheel.sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call)
                and len(d.args) == 2
                and isinstance(d.args[1], ast.Constant)
                and d.args[1].value == op
                for d in node.decorator_list
            ):
                return f, node
    return None


def check_op(wheel: Wheel, name: str) -> Result:
    passed, used, how = OP_CALLS[name]
    found = _meta(wheel, name.split(".")[-1])
    if found is None:
        return Result(f"WRONG: no meta registration of {name} in the wheel", "")
    f, fn = found
    problems = check_params(fn.args, passed, [])
    returns = [
        len(r.value.elts)
        for r in ast.walk(fn)
        if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple)
    ]
    if returns and returns[-1] != used:
        problems.append(f"returns {returns[-1]} tensors, afbench uses {used}")
    evidence = (
        f"meta registration {f}:{fn.lineno} {fn.name}({sig_text(fn.args)}) -> "
        f"{returns[-1] if returns else '?'} tensors; afbench: {how}"
    )
    return Result("WRONG: " + "; ".join(problems) if problems else "ok", evidence)


def check_enum_by_config(wheel: Wheel, owner: str, expr: str) -> Result:
    from afbench.config.models import NpuProfilerConfig  # the config values afbench can pass

    field = expr.rsplit(".", 1)[-1]
    values = typing.get_args(NpuProfilerConfig.model_fields[field].annotation)
    found = wheel.resolve(owner)
    if found is None or not isinstance(found[1], ast.ClassDef):
        return Result(f"WRONG: {owner} not found", "")
    members = [n for b in found[1].body for n in defined(b)]
    missing = [v for v in values if v not in members]
    evidence = (
        f"class at {_loc(*found)} has {', '.join(members)}; "
        f"optimization.npu_profiler.{field} allows {', '.join(values)}"
    )
    if not values:
        return Result(
            f"WRONG: optimization.npu_profiler.{field} is not a Literal: any string "
            "passes validation",
            evidence,
        )
    return Result(f"WRONG: {', '.join(missing)} not members" if missing else "ok", evidence)


def check_dynamo_backend(wheel: Wheel, backend: str, keywords: list[str]) -> Result:
    eps = wheel.entry_points()
    notes = []
    if eps.has_section("torch_dynamo_backends") and backend in eps["torch_dynamo_backends"]:
        target = eps["torch_dynamo_backends"][backend].strip()
        module, _, func = target.partition(":")
        found = wheel.resolve(f"{module}.{func}")
        if found is None:
            return Result(f"WRONG: entry point {backend} = {target} does not resolve", "")
        sig = signature(found[1])
        if sig is None or sig.kwarg is None:
            return Result(f"WRONG: {target} takes no **kwargs: options= cannot reach it", "")
        notes.append(
            f"entry point [torch_dynamo_backends] {backend} = {target} "
            f"({_loc(*found)}, ({sig_text(sig)}))"
        )
    else:
        where = _find_call(
            wheel, "_register_npu_backend", "npugraph_ex"
        ) or _registered_by_constant(wheel, backend)
        if where is None:
            return Result(
                f"WRONG: no torch_dynamo_backends entry point and no registration of {backend!r}",
                "",
            )
        notes.append(f"no entry point; registered when torch_npu is imported ({where})")
    if backend == "npugraph_ex" and "options" in keywords:
        cfg = wheel.resolve("torch_npu.dynamo.npugraph_ex.configs.compiler_config.CompilerConfig")
        proc = _find_call_name(wheel, "_process_kwargs_options")
        if cfg is None or proc is None:
            return Result(
                "WRONG: options= is not read by npugraph_ex (no CompilerConfig / "
                "_process_kwargs_options)",
                "; ".join(notes),
            )
        init = next(
            n for n in cfg[1].body if isinstance(n, ast.FunctionDef) and n.name == "__init__"
        )
        attrs = sorted(
            {
                t.attr
                for n in ast.walk(init)
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Attribute)
                and ast.unparse(t.value) == "self"
                and not t.attr.startswith("_")
            }
        )
        notes.append(
            f"options= keys are CompilerConfig attributes ({_loc(*cfg)}, checked by "
            f"_process_kwargs_options at {proc}): {', '.join(attrs)}"
        )
        if "force_eager" not in attrs:
            return Result(
                "WRONG: CompilerConfig has no force_eager (docs' debug option)", "; ".join(notes)
            )
    notes.append("fullgraph=, dynamic= are torch.compile's own")
    return Result("ok", "; ".join(notes))


def _find_call_name(wheel: Wheel, func: str) -> str | None:
    for f, tree in wheel.sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == func:
                return f"{f}:{node.lineno}"
    return None


def _registered_by_constant(wheel: Wheel, backend: str) -> str | None:
    """``_register_npu_backend(x, NAME)`` where ``NAME = "<backend>"`` (torch_npu 2.12)."""
    for f, tree in wheel.sources():
        consts = {
            t.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant)
            and n.value.value == backend
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("_register_npu_backend")
                and len(node.args) == 2
                and isinstance(node.args[1], ast.Name)
                and node.args[1].id in consts
            ):
                return f"{f}:{node.lineno}"
    return None


def check_npu_backend_option(wheel: Wheel, value: str) -> Result:
    option = next(
        (
            f"{f}:{n.lineno}"
            for f, t in wheel.sources()
            if f.startswith("torch_npu/utils/")
            for n in ast.walk(t)
            if isinstance(n, ast.Constant) and n.value == "npu_backend"
        ),
        None,
    )
    if option is None:
        return Result("WRONG: torch_npu registers no inductor option npu_backend", "")
    loaders = wheel.resolve("torch_npu._inductor._BACKEND_LOADERS")
    keys = (
        [k.value for k in loaders[1].value.keys]
        if loaders and isinstance(getattr(loaders[1], "value", None), ast.Dict)
        else []
    )
    evidence = f"inductor option npu_backend added by torch_npu ({option})"
    if value in keys and wheel.has_dir(f"torch_npu/_inductor/{value}"):
        return Result(
            "ok",
            f"{evidence}; {value!r} in torch_npu._inductor._BACKEND_LOADERS "
            f"({', '.join(keys)}), code in torch_npu/_inductor/{value}/",
        )
    return Result(
        f"UNVERIFIED: torch_npu {wheel.version} has no {value!r} inductor backend; "
        "AutoFuse then comes from inductor_npu_ext (torchair repository, "
        "experimental/_inductor_npu_ext, built from source; not on PyPI)",
        evidence,
    )


def check_import(wheel: Wheel, module: str) -> Result:
    if module == "inductor_npu_ext":
        if wheel.has_dir("torch_npu/_inductor/ascendc"):
            return Result(
                "ok",
                "not needed: the wheel ships the ascendc backend "
                "(torch_npu/_inductor/ascendc), and backends/npu.py imports "
                "inductor_npu_ext only when torch_npu has no _inductor/ascendc",
            )
        return Result(
            "UNVERIFIED: inductor_npu_ext is not in this wheel nor on PyPI; it is "
            "torchair's experimental/_inductor_npu_ext (built from source)",
            "backends/npu.py needs it for autofuse with this torch_npu",
        )
    if wheel.module_file(module):
        return Result("ok", f"{wheel.module_file(module)} in the wheel")
    return Result(f"WRONG: {module} is not in the wheel", "")


def check(wheel: Wheel, key: str) -> Result:
    """The verdict on one scanned key against one wheel."""
    if key.startswith("import "):
        return check_import(wheel, key.split()[1])
    if key.startswith('torch.compile(backend="inductor", options={"npu_backend": '):
        return check_npu_backend_option(wheel, key.split('"npu_backend": "')[1].split('"')[0])
    if key.startswith("torch.compile(backend="):
        backend = key.split('"')[1]
        return check_dynamo_backend(wheel, backend, _split(key)[2])  # type: ignore[index]
    if key == 'torch.distributed.init_process_group(backend="hccl")':
        where = _find_call(wheel, "register_backend", "hccl")
        return (
            Result("ok", f"torch.distributed.Backend.register_backend('hccl', ...) at {where}")
            if where
            else Result("WRONG: torch_npu registers no 'hccl' process-group backend", "")
        )
    if key.endswith("]"):
        owner, _, expr = key[:-1].partition("[")
        return check_enum_by_config(wheel, owner, expr)
    if key in OP_CALLS:
        return check_op(wheel, key)
    call = _split(key)
    name = _wheel_name(call[0] if call else key)
    if name in ("torch_npu.__file__",):
        return Result("ok", "module attribute")
    found = wheel.resolve(name)
    if found is None:
        return Result(f"WRONG: {name} not found in the wheel's Python", "")
    module, node = found
    if module.startswith("C extension"):
        owner, attr = name.rsplit(".", 1)
        where = _uses_attr(wheel, owner.rsplit(".", 1)[-1], attr) if not call else None
        if where:
            return Result(
                "ok",
                f"{module} (compiled); the wheel's Python reads "
                f"{owner.rsplit('.', 1)[-1]}.{attr} at {where}",
            )
        return Result(f"UNVERIFIED: {name} is in the C extension ({module})", "")
    if call is None:
        return Result("ok", f"defined at {_loc(module, node)}")
    sig = signature(node)
    if sig is None:
        return Result(
            f"WRONG: {name} at {_loc(module, node)} is not callable as afbench calls it", ""
        )
    problems = check_params(sig, call[1], call[2])
    evidence = f"{_loc(module, node)} ({sig_text(sig)})"
    return Result("WRONG: " + "; ".join(problems) if problems else "ok", evidence)


# ------------------------------------------------------------------------------ the run


def download(requirement: str, offline: bool) -> Path:
    """The wheel of ``requirement`` in :data:`CACHE`, downloaded with pip unless there."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    cached = sorted(CACHE.glob(pattern))
    if cached or offline:
        if not cached:
            raise SystemExit(f"{pattern} not in {CACHE}; run without --offline")
        return cached[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            PYTHON_VERSION,
            "--platform",
            PLATFORM,
            "-d",
            str(CACHE),
            requirement,
        ],
        check=True,
    )
    return sorted(CACHE.glob(pattern))[0]


def wheel_header(wheel: Wheel) -> list[str]:
    eps = wheel.entry_points()
    lines = [
        f"wheel: {wheel.path.name} sha256 "
        f"{hashlib.sha256(wheel.path.read_bytes()).hexdigest()[:16]}"
    ]
    backends = (
        dict(eps["torch_dynamo_backends"]) if eps.has_section("torch_dynamo_backends") else {}
    )
    for name in NPU_DYNAMO_BACKENDS:
        target = backends.get(name)
        if target:
            module, _, func = target.strip().partition(":")
            ok = wheel.resolve(f"{module}.{func}") is not None
            lines.append(
                f"entry point torch_dynamo_backends {name} = {target.strip()}: "
                f"{'resolves' if ok else 'DOES NOT RESOLVE'}"
            )
        else:
            lines.append(f"entry point torch_dynamo_backends {name}: absent")
    lines.append(
        "torchair: "
        + (
            "ships as torch_npu.dynamo.torchair; afbench calls no torchair name"
            if wheel.has_dir("torch_npu/dynamo/torchair")
            else "not in the wheel"
        )
    )
    lines.append(
        "AutoFuse (ascendc inductor backend): "
        + (
            "torch_npu/_inductor/ascendc"
            if wheel.has_dir("torch_npu/_inductor/ascendc")
            else "not in the wheel (inductor_npu_ext, torchair repository)"
        )
    )
    return lines


def render(calls: dict[str, list[str]], wheels: list[tuple[Wheel, str]], head: str) -> str:
    out = [
        f"# afbench npu API conformance: {head}",
        "# Calls scanned from src/afbench with ast; each checked against the wheel's Python "
        "sources and entry_points.txt, its C extension never imported.",
        "# <name(parameters afbench passes)> | <ok | WRONG: ... | UNVERIFIED: ...> | <evidence> "
        "| <where afbench uses it>",
    ]
    for wheel, label in wheels:
        out += ["", f"== torch-npu {wheel.version} ({label}) =="]
        out += [f"# {line}" for line in wheel_header(wheel)]
        for key, where in calls.items():
            r = check(wheel, key)
            out.append(f"{key} | {r.status} | {r.evidence} | {', '.join(where)}")
    return "\n".join(out) + "\n"


def read_results(path: Path = RESULT) -> dict[str, dict[str, str]]:
    """The committed result file: wheel version -> key -> status."""
    out: dict[str, dict[str, str]] = {}
    section = None
    for line in path.read_text().splitlines():
        if line.startswith("== torch-npu "):
            section = line.split()[2]
            out[section] = {}
        elif section and line and not line.startswith("#"):
            key, status = line.split(" | ")[:2]
            out[section][key] = status
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--offline", action="store_true", help=f"only wheels already in {CACHE}")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    calls = scan_calls()
    wheels = [(Wheel(download(req, args.offline)), label) for req, label in WHEELS]
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    text = render(
        calls,
        wheels,
        f"{_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"afbench HEAD {head}, Python {sys.version.split()[0]}",
    )
    RESULT.write_text(text)
    print(text, end="")
    released = wheels[0][0].version
    bad = [k for k, v in read_results()[released].items() if v != "ok"]
    print(
        f"\n{len(calls)} calls; torch-npu {released}: "
        f"{'all ok' if not bad else f'{len(bad)} not ok: ' + ', '.join(bad)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
