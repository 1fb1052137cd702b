"""The scan half of bench/npu_api_conformance.py: every torch_npu / torchair /
inductor_npu_ext use in afbench's source, found with ``ast`` (stdlib only, no afbench import),
as keys ``name(parameters afbench passes)``. tests/test_npu_api_conformance.py calls it too."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "afbench"
#: Dynamo backends torch_npu registers; a torch.compile(backend=...) with one of them is a key.
NPU_DYNAMO_BACKENDS = ("npu", "npugraph_ex", "npugraphs")
#: Modules whose import by name is a key.
NPU_MODULES = ("torch_npu", "torchair", "inductor_npu_ext")


@dataclass(frozen=True)
class Use:
    """One use of an NPU name in afbench: ``key`` (name and parameters), ``where`` (file:line)."""

    key: str
    where: str


def _chain(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """Dotted NPU name of ``node`` (``torch_npu.profiler.profile``), or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        if node.attr == "torch_npu":  # self.torch_npu, backend.torch_npu
            return ".".join(reversed(parts))
        node = node.value
    if isinstance(node, ast.Name):
        root = aliases.get(node.id) or (node.id if node.id == "torch_npu" else None)
        if root is None and node.id == "torch" and parts and parts[-1] == "npu":
            root = "torch"
        if root is not None:
            return ".".join([root, *reversed(parts)])
    return None


def _params(call: ast.Call) -> list[str]:
    out = [f"<{len(call.args)} positional>"] if call.args else []
    out += [
        f"{k.arg}=" if k.arg else f"**{ast.unparse(k.value)}"
        for k in call.keywords
        if k.arg != "backend"
    ]
    return out


class _Scanner(ast.NodeVisitor):
    def __init__(self, rel: str, param_aliases: dict[tuple[str, int], str]) -> None:
        self.rel, self.uses, self.param_aliases = rel, [], param_aliases
        self.aliases: dict[str, str] = {}

    def add(self, key: str, node: ast.AST) -> None:
        self.uses.append(Use(key, f"{self.rel}:{node.lineno}"))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        saved = dict(self.aliases)
        for i, arg in enumerate(node.args.args):
            if (node.name, i) in self.param_aliases:
                self.aliases[arg.arg] = self.param_aliases[(node.name, i)]
        self.generic_visit(node)
        self.aliases = saved

    def visit_Assign(self, node: ast.Assign) -> None:
        name = _chain(node.value, self.aliases)
        if name and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.aliases[node.targets[0].id] = name
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name.split(".")[0] in NPU_MODULES:
                self.add(f"import {a.name}", node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        # from torch_npu.profiler import profile: later uses of profile are torch_npu names
        if node.module and node.module.split(".")[0] in NPU_MODULES:
            self.add(f"import {node.module}", node)
            for a in node.names:
                self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = _chain(f, self.aliases)
        consts = [a.value for a in node.args if isinstance(a, ast.Constant)]
        if name:  # the callee is recorded with its parameters, not again as an attribute
            self.add(f"{name}({', '.join(_params(node))})", node)
            for child in [*node.args, *node.keywords]:
                self.visit(child)
            return
        if isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) >= 2:
            owner = _chain(node.args[0], self.aliases)
            if owner:
                attr = node.args[1]
                self.add(
                    f"{owner}.{attr.value}"
                    if isinstance(attr, ast.Constant)
                    else f"{owner}[{ast.unparse(attr)}]",
                    node,
                )
                return
        elif (
            ast.unparse(f) in ("importlib.import_module", "import_module")
            and consts
            and str(consts[0]).split(".")[0] in NPU_MODULES
        ):
            self.add(f"import {consts[0]}", node)
        elif ast.unparse(f) == "torch.compile":
            backend = next(
                (
                    k.value.value
                    for k in node.keywords
                    if k.arg == "backend" and isinstance(k.value, ast.Constant)
                ),
                None,
            )
            if backend in NPU_DYNAMO_BACKENDS:
                self.add(f'torch.compile(backend="{backend}", {", ".join(_params(node))})', node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = _chain(node, self.aliases)
        if name and name not in ("torch_npu", "torch.npu"):
            self.add(name, node)
            return  # the chain is one use, not one per prefix
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for k, v in zip(node.keys, node.values):
            if (
                isinstance(k, ast.Constant)
                and k.value == "npu_backend"
                and isinstance(v, ast.Constant)
            ):
                self.add(
                    f'torch.compile(backend="inductor", options={{"npu_backend": "{v.value}"}})',
                    node,
                )
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value == "hccl":
            self.add('torch.distributed.init_process_group(backend="hccl")', node)


def _param_aliases(trees: dict[str, ast.Module]) -> dict[tuple[str, int], str]:
    """(function name, positional index) -> NPU module passed there (``f(torch.npu, ...)``)."""
    out = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                for i, arg in enumerate(node.args):
                    name = _chain(arg, {})
                    if name in ("torch.npu", "torch_npu"):
                        out[(node.func.id, i)] = name
    return out


def scan_calls(src: Path = SRC) -> dict[str, list[str]]:
    """Every NPU use in the Python files under ``src``: key -> sorted ``file:line`` list."""
    trees = {
        str(p.relative_to(src.parent)): ast.parse(p.read_text(), str(p))
        for p in sorted(src.rglob("*.py"))
    }
    aliases = _param_aliases(trees)
    out: dict[str, list[str]] = {}
    for rel, tree in trees.items():
        scanner = _Scanner(rel, aliases)
        scanner.visit(tree)
        for use in scanner.uses:
            out.setdefault(use.key, []).append(use.where)
    return {k: sorted(set(v)) for k, v in sorted(out.items())}
