"""The tiny Qwen3 shipped as ``assets/qwen3_tiny``: config, seeded init, brief CPU training.

Shape (see docs/reference.md §8): hidden 256, 4 layers, 4 query / 2 KV heads
of dim 64, FFN 768, ~2.4k vocab, tied embeddings, ~3.8M parameters, fp32.
Training is plain next-token prediction on packed ChatML Wordle chats, so
greedy decoding from a Wordle prompt yields Wordle-shaped turns; it is a
benchmark fixture, not a good player.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from afbench.assets.tokenizer import ENDOFTEXT, IM_END

log = logging.getLogger(__name__)

ROPE_THETA = 1_000_000.0  # Qwen3's value


@dataclass(frozen=True)
class TinyTrainConfig:
    """Pretraining recipe; defaults take ~3 min on 2 CPU threads (0.28 s/step)."""

    seed: int = 0
    steps: int = 600
    batch_size: int = 4
    seq_len: int = 256
    lr: float = 2e-3
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    num_threads: int = 2
    log_every: int = 50


def tiny_qwen3_config(vocab_size: int, special_ids: dict[str, int]):
    """``Qwen3Config`` of the tiny model; ``special_ids`` maps token text to id."""
    from transformers import Qwen3Config  # transformers: ~2 s, only when the model is built

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=2048,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        attention_bias=False,
        use_sliding_window=False,
        max_window_layers=4,
        attention_dropout=0.0,
        bos_token_id=special_ids[ENDOFTEXT],
        eos_token_id=special_ids[IM_END],
        pad_token_id=special_ids[ENDOFTEXT],
        dtype="float32",
        architectures=["Qwen3ForCausalLM"],
    )


def pack_windows(token_streams: Sequence[Sequence[int]], sep_id: int, seq_len: int) -> torch.Tensor:
    """Concatenate streams (each followed by ``sep_id``) and cut ``[n, seq_len + 1]`` windows.

    Consecutive windows overlap by one token so every position is a target
    once; the tail shorter than a window is dropped.
    """
    flat: list[int] = []
    for ids in token_streams:
        flat.extend(ids)
        flat.append(sep_id)
    n = (len(flat) - 1) // seq_len
    if n < 1:
        raise ValueError(f"{len(flat)} tokens are fewer than one window of {seq_len + 1}")
    data = torch.tensor(flat[: n * seq_len + 1], dtype=torch.long)
    return torch.stack([data[i * seq_len : (i + 1) * seq_len + 1] for i in range(n)])


def _lr_at(step: int, cfg: TinyTrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def build_model(vocab_size: int, special_ids: dict[str, int], seed: int):
    """A freshly initialised ``Qwen3ForCausalLM`` (fp32); same ``seed`` gives the same weights."""
    # transformers: ~2 s, only when the model is built
    from transformers import GenerationConfig, Qwen3ForCausalLM

    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(tiny_qwen3_config(vocab_size, special_ids)).float()
    model.generation_config = GenerationConfig(
        bos_token_id=special_ids[ENDOFTEXT],
        eos_token_id=special_ids[IM_END],
        pad_token_id=special_ids[ENDOFTEXT],
        do_sample=False,
        max_new_tokens=64,
    )
    return model


def train(model, windows: torch.Tensor, cfg: TinyTrainConfig) -> list[float]:
    """Train ``model`` in place on ``windows`` ``[n, seq_len + 1]``; returns the per-step losses.

    Windows are visited in a seeded permutation (reshuffled each epoch).
    Deterministic for a given torch build and CPU instruction set.
    """
    torch.set_num_threads(cfg.num_threads)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    model.train()
    order = torch.randperm(len(windows), generator=gen)
    cursor = 0
    losses: list[float] = []
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        if cursor + cfg.batch_size > len(order):
            order, cursor = torch.randperm(len(windows), generator=gen), 0
        batch = windows[order[cursor : cursor + cfg.batch_size]]
        cursor += cfg.batch_size
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % cfg.log_every == 0 or step == 0:
            elapsed = time.perf_counter() - t0
            log.info(
                "step: %4d  loss: %.4f  lr: %.2e  elapsed_s: %.1f  step_time_s: %.3f",
                step + 1,
                loss.item(),
                _lr_at(step, cfg),
                elapsed,
                elapsed / (step + 1),
            )
    model.eval()
    return losses


def save_model(model, folder: Path) -> list[Path]:
    """Write ``config.json``, ``generation_config.json``, ``model.safetensors`` (fp32) into ``folder``.

    ``config.json`` also gets ``torch_dtype`` and ``rope_theta`` at top level so
    transformers 4.x (which predates ``dtype`` / ``rope_parameters``) reads the
    same model. Returns the three paths.
    """
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    cfg_path = folder / "config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg.setdefault("torch_dtype", "float32")
    cfg.setdefault("rope_theta", ROPE_THETA)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return [cfg_path, folder / "generation_config.json", folder / "model.safetensors"]


def greedy_reply(model_dir: Path, messages: list[dict[str, str]], max_new_tokens: int = 48) -> str:
    """Greedy continuation of ``messages`` by the saved model (for smoke checks and reports)."""
    # transformers: ~2 s, only when the model is checked
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
