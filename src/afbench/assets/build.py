"""Deterministic (re)build of the default assets: word list, Wordle parquet, tiny Qwen3, manifest."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from afbench.assets.dataset import (
    FIRST_USER_MESSAGE,
    SYSTEM_PROMPT,
    game_to_row,
    rows_to_messages,
    write_parquet,
)
from afbench.assets.manifest import AssetLayout, write_manifest
from afbench.assets.wordle import play_games
from afbench.assets.words import load_or_build_word_list, write_word_list
from afbench.errors import AssetError

log = logging.getLogger(__name__)


class AssetBuildError(AssetError):
    """A build step could not produce its asset (message says which and why)."""


@dataclass(frozen=True)
class BuildConfig:
    """What ``python -m afbench.assets build`` makes; defaults are the shipped assets."""

    sample_games: int = 400
    sample_seed: int = 42
    train_games: int = 2000
    train_seed: int = 1
    vocab_size: int = 2400
    model_seed: int = 0
    train_steps: int = 600
    model_max_length: int = 2048
    num_threads: int = 2


@dataclass
class BuildReport:
    """What a build wrote and how long each part took (seconds)."""

    layout: AssetLayout
    n_words: int = 0
    n_sample_games: int = 0
    solved_fraction: float = 0.0
    final_loss: float = float("nan")
    greedy_sample: str = ""
    timings_s: dict[str, float] = field(default_factory=dict)


def _apply_umask(folder: Path) -> None:
    # mkdtemp makes 0700 folders and safetensors writes 0600 files; give the
    # shipped model the same modes as every other file written under the umask.
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for p in folder.iterdir():
        p.chmod(0o666 & ~umask)


def build_assets(out: Path, cfg: BuildConfig = BuildConfig()) -> BuildReport:
    """Build every default asset under ``out`` and write ``out/assets.sha256``.

    The model folder is written to a temporary sibling and swapped in, so a
    stale file from an older build cannot linger in it. Raises
    :class:`AssetBuildError` when a step fails for a known reason.
    """
    from afbench.assets import model as tiny  # torch, transformers: only when assets are built
    from afbench.assets import tokenizer as bpe  # tokenizers: only when assets are built

    layout = AssetLayout(out.resolve())
    layout.root.mkdir(parents=True, exist_ok=True)
    report = BuildReport(layout=layout)
    t = time.perf_counter()

    try:
        words = load_or_build_word_list(layout.words_file)
    except FileNotFoundError as e:
        raise AssetBuildError(str(e)) from e
    write_word_list(words, layout.words_file)
    report.n_words = len(words)

    sample_games = play_games(words, cfg.sample_games, cfg.sample_seed)
    sample_rows = [game_to_row(g) for g in sample_games]
    write_parquet(sample_rows, layout.data_file)
    report.n_sample_games = len(sample_rows)
    report.solved_fraction = sum(g.solved for g in sample_games) / max(1, len(sample_games))
    train_rows = [game_to_row(g) for g in play_games(words, cfg.train_games, cfg.train_seed)]
    chats = [bpe.render_chatml(rows_to_messages(r)) for r in sample_rows + train_rows]
    report.timings_s["data"] = time.perf_counter() - t
    log.info(
        "data: %d words, %d sample games (%.0f%% solved), %d training chats",
        len(words),
        len(sample_rows),
        100 * report.solved_fraction,
        len(chats),
    )

    t = time.perf_counter()
    try:
        tok = bpe.train_bpe([*words, *chats], cfg.vocab_size)
    except ValueError as e:
        raise AssetBuildError(f"tokenizer: {e}") from e
    special_ids = {s: tok.token_to_id(s) for s in bpe.SPECIAL_TOKENS}
    report.timings_s["tokenizer"] = time.perf_counter() - t

    t = time.perf_counter()
    train_cfg = tiny.TinyTrainConfig(
        seed=cfg.model_seed, steps=cfg.train_steps, num_threads=cfg.num_threads
    )
    windows = tiny.pack_windows(
        [tok.encode(c).ids for c in chats], special_ids[bpe.ENDOFTEXT], train_cfg.seq_len
    )
    model = tiny.build_model(tok.get_vocab_size(), special_ids, cfg.model_seed)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "model: %.2fM parameters, %d training windows of %d tokens",
        n_params / 1e6,
        len(windows),
        train_cfg.seq_len,
    )
    losses = tiny.train(model, windows, train_cfg)
    report.final_loss = sum(losses[-20:]) / max(1, len(losses[-20:]))
    report.timings_s["train"] = time.perf_counter() - t

    staging = Path(tempfile.mkdtemp(prefix=f".{layout.model_dir.name}-", dir=layout.root))
    try:
        tiny.save_model(model, staging)
        bpe.save_tokenizer(tok, staging, cfg.model_max_length)
        _apply_umask(staging)
        if layout.model_dir.exists():
            shutil.rmtree(layout.model_dir)
        staging.rename(layout.model_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)

    files = sorted(p for p in layout.model_dir.rglob("*") if p.is_file())
    write_manifest(layout.root, [*files, layout.data_file, layout.words_file])

    report.greedy_sample = tiny.greedy_reply(
        layout.model_dir,
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": FIRST_USER_MESSAGE},
        ],
    )
    log.info("greedy reply to the first Wordle prompt: %r", report.greedy_sample)
    return report
