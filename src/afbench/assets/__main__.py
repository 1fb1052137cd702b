"""``python -m afbench.assets build|verify``: (re)build or check the default assets.

Exit codes: 0 success, 1 verification found problems, 2 build failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from afbench.assets.manifest import MANIFEST_NAME, default_assets_dir, verify_manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m afbench.assets", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build", help="deterministically rebuild word list, Wordle parquet, tiny model, manifest"
    )
    b.add_argument(
        "--out",
        type=Path,
        default=None,
        help="assets folder (default: %(default)s -> repo assets/)",
    )
    b.add_argument(
        "--train-steps", type=int, default=None, help="model training steps (default 600)"
    )
    b.add_argument("--threads", type=int, default=None, help="torch CPU threads (default 2)")
    v = sub.add_parser("verify", help="check files against the sha256 manifest")
    v.add_argument(
        "--manifest", type=Path, default=None, help=f"manifest (default: <assets>/{MANIFEST_NAME})"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    if args.command == "verify":
        manifest = args.manifest or default_assets_dir() / MANIFEST_NAME
        problems = verify_manifest(manifest)
        for p in problems:
            print(f"[FAIL] {p}")
        if problems:
            return 1
        print(f"[OK] all files listed in {manifest} match")
        return 0

    # transformers, tokenizers: only for `build`, not `verify`
    from afbench.assets.build import AssetBuildError, BuildConfig, build_assets

    overrides = {}
    if args.train_steps is not None:
        overrides["train_steps"] = args.train_steps
    if args.threads is not None:
        overrides["num_threads"] = args.threads
    out = args.out or default_assets_dir()
    t0 = time.perf_counter()
    try:
        report = build_assets(out, BuildConfig(**overrides))
    except AssetBuildError as e:
        print(f"[FAIL] build: {e}", file=sys.stderr)
        return 2
    wall_s = time.perf_counter() - t0
    print(
        f"[OK] built {report.layout.root} in {wall_s:.1f} s "
        f"({', '.join(f'{k} {v:.1f} s' for k, v in report.timings_s.items())}); "
        f"{report.n_words} words, {report.n_sample_games} games "
        f"({100 * report.solved_fraction:.0f}% solved), final loss {report.final_loss:.3f}"
    )
    print(f"greedy sample: {report.greedy_sample!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
