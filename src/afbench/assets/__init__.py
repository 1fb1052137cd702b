"""Default assets of afbench: a tiny Qwen3, a Wordle SFT sample and their manifest.

Build with ``python -m afbench.assets build``, check with
``python -m afbench.assets verify``. Importing this package does not import
torch or transformers.
"""

from afbench.assets.manifest import (
    ASSETS_ENV,
    MANIFEST_NAME,
    AssetLayout,
    default_assets_dir,
    sha256_file,
    verify_manifest,
    write_manifest,
)
from afbench.assets.wordle import parse_guess, render_feedback, score_guess

__all__ = [
    "ASSETS_ENV",
    "MANIFEST_NAME",
    "AssetLayout",
    "default_assets_dir",
    "parse_guess",
    "render_feedback",
    "score_guess",
    "sha256_file",
    "verify_manifest",
    "write_manifest",
]
