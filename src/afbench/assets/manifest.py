"""Where the default assets live, and their SHA-256 manifest.

The manifest is in ``sha256sum`` format, so ``cd assets && sha256sum --check
assets.sha256`` works too: one ``<64 hex>  <path>`` line per file (a ``*``
before the path, sha256sum's binary marker, is accepted), paths relative to
the manifest's folder, sorted, with ``/`` separators.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ASSETS_ENV = "AFBENCH_ASSETS"
MANIFEST_NAME = "assets.sha256"
MODEL_DIRNAME = "qwen3_tiny"
DATA_RELPATH = "wordle_sample/data/train-00000-of-00001.parquet"
WORDS_RELPATH = "words/wordle_words.txt"

_CHUNK = 1 << 20


def default_assets_dir() -> Path:
    """The assets folder: ``$AFBENCH_ASSETS`` if set, else the repository's ``assets/``.

    The repository root is found from this file's location
    (``<root>/src/afbench/assets/manifest.py``), so it holds for a source
    checkout or an editable install; set ``AFBENCH_ASSETS`` otherwise. The
    folder is not required to exist.
    """
    env = os.environ.get(ASSETS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[3] / "assets"


@dataclass(frozen=True)
class AssetLayout:
    """Paths of the default assets under one root folder."""

    root: Path

    @property
    def model_dir(self) -> Path:
        """HF-format folder of the tiny Qwen3 (config, weights, tokenizer)."""
        return self.root / MODEL_DIRNAME

    @property
    def data_file(self) -> Path:
        """Wordle SFT parquet in the ``willcb/V3-wordle`` schema."""
        return self.root / DATA_RELPATH

    @property
    def words_file(self) -> Path:
        """Five-letter word list, one per line."""
        return self.root / WORDS_RELPATH

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_NAME

    @classmethod
    def default(cls) -> AssetLayout:
        return cls(default_assets_dir())


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(root: Path, files: Iterable[Path], name: str = MANIFEST_NAME) -> Path:
    """Hash ``files`` and write ``root/name``; returns the manifest path.

    ``files`` may be absolute or relative to ``root``; every one must be a
    regular file inside ``root`` (``ValueError`` otherwise). Lines are sorted
    by path so the manifest depends only on the files' contents.
    """
    root = root.resolve()
    entries: dict[str, str] = {}
    for f in files:
        path = (f if f.is_absolute() else root / f).resolve()
        try:
            rel = path.relative_to(root)
        except ValueError:
            raise ValueError(f"{f} is not inside {root}") from None
        if not path.is_file():
            raise ValueError(f"{path} is not a regular file")
        entries[rel.as_posix()] = sha256_file(path)
    if not entries:
        raise ValueError("no files to put in the manifest")
    manifest = root / name
    manifest.write_text(
        "".join(f"{h}  {p}\n" for p, h in sorted(entries.items())), encoding="utf-8"
    )
    return manifest


def read_manifest(manifest: Path) -> tuple[dict[str, str], list[str]]:
    """Parse a manifest into ``{relative path: hex digest}`` plus one problem per bad line."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    for n, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition(" ")
        rel = rel[1:] if rel[:1] in (" ", "*") else rel
        if (
            not sep
            or len(digest) != 64
            or any(c not in "0123456789abcdefABCDEF" for c in digest)
            or not rel
        ):
            problems.append(f"{manifest}:{n}: not a '<sha256>  <path>' line: {line!r}")
            continue
        pure = PurePosixPath(rel)
        if pure.is_absolute() or ".." in pure.parts:
            problems.append(f"{manifest}:{n}: path escapes the manifest folder: {rel!r}")
            continue
        entries[rel] = digest.lower()
    return entries, problems


def verify_manifest(manifest: Path) -> list[str]:
    """Check every file the manifest lists; returns one message per problem (``[]`` = all OK).

    Problems: manifest missing or empty, malformed or escaping lines, a
    listed file missing or not a regular file, a SHA-256 mismatch (message
    gives expected and actual digest prefixes). Files not listed are ignored,
    as ``sha256sum --check`` does.
    """
    if not manifest.is_file():
        return [f"manifest not found: {manifest}"]
    entries, problems = read_manifest(manifest)
    if not entries and not problems:
        problems.append(f"manifest lists no files: {manifest}")
    root = manifest.parent
    for rel, expected in sorted(entries.items()):
        path = root / rel
        if not path.exists():
            problems.append(f"missing: {rel} (listed in {manifest})")
        elif not path.is_file():
            problems.append(f"not a regular file: {rel}")
        else:
            actual = sha256_file(path)
            if actual != expected:
                problems.append(
                    f"sha256 mismatch: {rel}: expected {expected[:12]}..., got {actual[:12]}..."
                )
    return problems
