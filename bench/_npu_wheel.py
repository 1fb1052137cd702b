"""The wheel half of bench/npu_api_conformance.py: a downloaded wheel read as a zip
(``entry_points.txt`` and the ``ast`` of its Python files; its C extension is never imported),
names resolved through re-exports, and signatures compared with the parameters afbench passes."""

from __future__ import annotations

import ast
import configparser
import typing
import zipfile
from pathlib import Path


class Wheel:
    """A downloaded wheel read as a zip: entry points and the ast of its Python modules."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._asts: dict[str, ast.Module | None] = {}
        self.version = (
            next(n for n in self.names if n.endswith(".dist-info/METADATA"))
            .split(".dist-info")[0]
            .split("-", 1)[1]
        )

    def entry_points(self) -> configparser.ConfigParser:
        cp = configparser.ConfigParser(delimiters=("=",))
        cp.optionxform = str  # type: ignore[assignment,method-assign]
        ep = next((n for n in self.names if n.endswith(".dist-info/entry_points.txt")), None)
        if ep:
            cp.read_string(self.zip.read(ep).decode())
        return cp

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        return next((f for f in (f"{base}.py", f"{base}/__init__.py") if f in self.names), None)

    def has_dir(self, folder: str) -> bool:
        return any(n.startswith(folder.rstrip("/") + "/") for n in self.names)

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._asts:
            f = self.module_file(module)
            self._asts[module] = ast.parse(self.zip.read(f).decode(), f) if f else None
        return self._asts[module]

    def sources(self) -> typing.Iterator[tuple[str, ast.Module]]:
        """(file, ast) of every Python file of the wheel."""
        for f in sorted(self.names):
            if f.endswith(".py"):
                try:
                    yield f, ast.parse(self.zip.read(f).decode(errors="replace"), f)
                except SyntaxError:
                    continue

    def resolve(self, dotted: str) -> tuple[str, ast.AST] | None:
        """(module, def/class/assign node) of a dotted name, following ``from X import Y [as Z]``
        re-exports; ``("<C extension> X", None)``-like tuples come back as (X, Module) for
        names imported from ``torch_npu._C``; None when not found."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if self.module_file(module):
                return self._member(module, parts[cut:])
        return None

    def _member(self, module: str, attrs: list[str], depth: int = 0) -> tuple[str, ast.AST] | None:
        tree = self.tree(module)
        if tree is None or depth > 8:
            return None
        if not attrs:
            return module, tree
        name, rest = attrs[0], attrs[1:]
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                return self._inside(module, node, rest)
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets) and not rest:
                    return module, node
            if isinstance(node, ast.ImportFrom):
                if node.names[0].name == "*":  # from .memory import *
                    found = self._member(self._absolute(module, node), attrs, depth + 1)
                    if found is not None:
                        return found
                    continue
                for a in node.names:
                    if (a.asname or a.name) == name:
                        src = self._absolute(module, node)
                        if src.startswith("torch_npu._C"):
                            return f"C extension {src}.{a.name}", node
                        sub = f"{src}.{a.name}"
                        if self.module_file(sub):
                            return self._member(sub, rest, depth + 1)
                        return self._member(src, [a.name, *rest], depth + 1)
        return None

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        is_pkg = (self.module_file(module) or "").endswith("__init__.py")
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
        return ".".join(base + ([node.module] if node.module else []))

    @staticmethod
    def _inside(module: str, node: ast.AST, rest: list[str]) -> tuple[str, ast.AST] | None:
        for name in rest:
            body = getattr(node, "body", [])
            node = next(
                (
                    n
                    for n in body
                    if isinstance(n, (ast.Assign, ast.FunctionDef, ast.ClassDef))
                    and name in defined(n)
                ),
                None,
            )
            if node is None:
                return None
        return module, node


def defined(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    return [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]


def signature(node: ast.AST) -> ast.arguments | None:
    """The arguments of a function, or of a class's ``__init__`` without ``self``."""
    if isinstance(node, ast.ClassDef):
        init = next(
            (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
        )
        if init is None:
            return None
        args = init.args
        return ast.arguments(
            posonlyargs=args.posonlyargs,
            args=args.args[1:],
            vararg=args.vararg,
            kwonlyargs=args.kwonlyargs,
            kw_defaults=args.kw_defaults,
            kwarg=args.kwarg,
            defaults=args.defaults,
        )
    return node.args if isinstance(node, ast.FunctionDef) else None


def sig_text(a: ast.arguments) -> str:
    return (
        ast.unparse(
            ast.FunctionDef(
                name="f",
                args=a,
                body=[ast.Pass()],
                decorator_list=[],
                returns=None,
                type_params=[],
                lineno=0,
            )
        )
        .split("(", 1)[1]
        .rsplit(")", 1)[0]
    )


def check_params(a: ast.arguments, positional: int, keywords: list[str]) -> list[str]:
    """What is wrong with calling ``a`` with ``positional`` arguments and ``keywords``."""
    pos = [x.arg for x in [*a.posonlyargs, *a.args]]
    kw_ok = {x.arg for x in [*a.args, *a.kwonlyargs]}
    problems = []
    if positional > len(pos) and a.vararg is None:
        problems.append(f"{positional} positional arguments, it takes {len(pos)}")
    for k in keywords:
        if k not in kw_ok and a.kwarg is None:
            problems.append(f"no parameter {k!r}")
    given = set(pos[:positional]) | set(keywords)
    required = pos[: len(pos) - len(a.defaults)] + [
        x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None
    ]
    problems += [f"required parameter {r!r} not passed" for r in required if r not in given]
    return problems
