"""afbench's torchtitan config function: the model in ``model.path`` and the data in
``data.path``, as a torchtitan 0.3.0 ``Trainer.Config``.

The torchtitan process imports this module (``--module afbench.engines.torchtitan.qwen3
--config qwen3_from_hf``, the default of ``engine.flavor=torchtitan``); torchtitan calls the
function with no arguments, so the run's paths come from the environment that afbench's
command line sets (:func:`afbench.engines.torchtitan.cmdline.build_command`):

* ``AFBENCH_MODEL_PATH``: the HF model folder; the model's sizes come from its ``config.json``
  (:func:`afbench.engines.torchtitan.hf_model.qwen3_dims`), its tokenizer and safetensors
  weights are torchtitan's HF assets and initial checkpoint (loaded through torchtitan's
  ``Qwen3StateDictAdapter``).
* ``AFBENCH_DATA_PATH``: a chat parquet file (``messages``, or ``prompt`` + ``completion``),
  read by torchtitan's ``ChatDataLoader`` (HF ``datasets`` ``"parquet"`` builder) with
  :func:`single_turn` as the sample processor: torchtitan 0.3.0's ``ChatDataset`` takes only
  single-turn ``[user, assistant]`` pairs (``hf_datasets/text_datasets.py``,
  ``_validate_messages``), so a multi-turn conversation (Wordle's system prompt and guess /
  feedback turns) trains on its last assistant turn, with every earlier turn in the user
  message.

Steps, sequence length, batch sizes, seed, compile, profiler and dump folder stay on the
command line. Imports torchtitan: only the torchtitan process and preflight's probe import it.
"""

from __future__ import annotations

import os

from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.metrics import MetricsProcessor
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.config import TrainingConfig
from torchtitan.hf_datasets.text_datasets import ChatDataLoader
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.qwen3 import model_registry
from torchtitan.models.qwen3.model import Qwen3Model
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer

from afbench.engines.data import row_messages
from afbench.engines.torchtitan.cmdline import DATA_ENV, MODEL_ENV
from afbench.engines.torchtitan.hf_model import qwen3_dims

try:  # torchtitan 0.3.0's dense Qwen3 layer builder: the presets' own construction
    from torchtitan.models.qwen3 import _build_qwen3_layers, _qwen3_norm
except ImportError as exc:  # pragma: no cover - another torchtitan version
    raise ImportError(
        "afbench's torchtitan config function is written for torchtitan 0.3.0 "
        f"(torchtitan.models.qwen3._build_qwen3_layers): {exc}"
    ) from exc


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValueError(
            f"{name} is not set: afbench sets it on the torchtitan command line's "
            "environment (engine.flavor=torchtitan)"
        )
    return value


def qwen3_model_config(model_path: str, attn_backend: str = "flex") -> Qwen3Model.Config:
    """torchtitan's ``Qwen3Model.Config`` for the HF folder ``model_path`` (built the way
    torchtitan's own Qwen3 presets are, with the sizes of its ``config.json``).

    Raises:
        afbench.errors.ConfigError: the model is not one torchtitan's dense Qwen3 builds.
    """
    d = qwen3_dims(model_path)
    return Qwen3Model.Config(
        vocab_size=d["vocab_size"],
        dim=d["dim"],
        norm=_qwen3_norm(d["dim"]),
        enable_weight_tying=d["enable_weight_tying"],
        tok_embeddings=Embedding.Config(num_embeddings=d["vocab_size"], embedding_dim=d["dim"]),
        lm_head=Linear.Config(in_features=d["dim"], out_features=d["vocab_size"]),
        layers=_build_qwen3_layers(
            n_layers=d["n_layers"],
            dim=d["dim"],
            n_heads=d["n_heads"],
            n_kv_heads=d["n_kv_heads"],
            head_dim=d["head_dim"],
            hidden_dim=d["hidden_dim"],
            attn_backend=attn_backend,
            rope=CosSinRoPE.Config(
                dim=d["head_dim"], max_seq_len=d["max_seq_len"], theta=d["rope_theta"]
            ),
        ),
    )


def qwen3_model_spec(model_path: str, attn_backend: str = "flex") -> ModelSpec:
    """The ``ModelSpec`` of torchtitan's Qwen3 (its parallelize, pipelining and HF state-dict
    adapter) with the model of ``model_path``; ``flavor`` names the folder."""
    preset = model_registry("debugmodel", attn_backend=attn_backend)
    return ModelSpec(
        name=preset.name,
        flavor=f"hf:{os.path.basename(os.path.normpath(model_path))}",
        model=qwen3_model_config(model_path, attn_backend),
        parallelize_fn=preset.parallelize_fn,
        pipelining_fn=preset.pipelining_fn,
        post_optimizer_build_fn=preset.post_optimizer_build_fn,
        state_dict_adapter=preset.state_dict_adapter,
    )


def single_turn(sample: dict) -> list[dict[str, str]]:
    """One chat row (:func:`afbench.engines.data.row_messages`) as the ``[user, assistant]``
    pair torchtitan 0.3.0's ``ChatDataset`` accepts: the last assistant message is the
    response; the messages before it become the user message, one ``<role>: <content>`` block
    each (a plain ``[user, assistant]`` pair is kept as it is).

    Raises:
        ValueError: the row has no assistant message.
    """
    messages = row_messages(sample)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None:
        raise ValueError(f"a chat row without an assistant message: {messages[:2]}")
    before = messages[:last]
    if len(before) == 1 and before[0]["role"] == "user":
        return [before[0], messages[last]]
    prompt = "\n\n".join(f"{m['role']}: {m['content']}" for m in before)
    return [{"role": "user", "content": prompt}, messages[last]]


def qwen3_from_hf() -> Trainer.Config:
    """The ``Trainer.Config`` for ``$AFBENCH_MODEL_PATH`` trained on ``$AFBENCH_DATA_PATH``
    (see the module docstring); AdamW lr 8e-4 with 2 warmup steps (torchtitan's Qwen3
    debug config), checkpoints only loaded (HF safetensors), never saved."""
    model_path, data_path = _env(MODEL_ENV), _env(DATA_ENV)
    spec = qwen3_model_spec(model_path)
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec))
        ),
        hf_assets_path=model_path,
        metrics=MetricsProcessor.Config(log_freq=1),
        model_spec=spec,
        dataloader=ChatDataLoader.Config(
            dataset_path="parquet",
            load_dataset_kwargs={"data_files": data_path, "split": "train"},
            sample_processor=single_turn,
        ),
        optimizer=default_adamw(lr=8e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2),
        training=TrainingConfig(local_batch_size=1, seq_len=1024, steps=10),
        checkpoint=CheckpointManager.Config(
            enable=True, initial_load_path=model_path, initial_load_in_hf=True, load_only=True
        ),
    )
