"""FLOPs per token, parameter counts, MFU, published peaks and KV-cache size
(afbench.analysis.flops), against hand calculations, real transformers models and the
parameter counts Qwen publishes."""

from __future__ import annotations

import json

import pytest

from afbench.analysis import flops
from afbench.analysis.flops import ModelConfigError, TransformerShape

# Two layers, hidden 8, 2 query heads / 1 KV head of dim 4, MLP 16, vocabulary 10, tied.
SMALL = {
    "num_hidden_layers": 2,
    "hidden_size": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 4,
    "intermediate_size": 16,
    "vocab_size": 10,
    "tie_word_embeddings": True,
}

# Published config.json values (the comments of conf/model/qwen3_8b.yaml, qwen3_1_7b.yaml).
QWEN3_8B = {
    "num_hidden_layers": 36,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
}
QWEN3_1_7B = {
    "num_hidden_layers": 28,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


def test_small_config_flops_per_token_match_a_hand_calculation():
    # Per layer: q 8x(2*4)=64, k 8x(1*4)=32, v 32, o 64; q_norm, k_norm 4 each;
    # MLP gate + up + down 3x8x16 = 384; two RMSNorms 2x8 = 16. Sum 600; two layers 1200.
    # Final norm 8 -> non-embedding 1208. lm_head (the tied table) 10x8 = 80 -> N = 1288.
    # 6N = 7728; attention 12 x L2 x H2 x Q4 x T5 = 960; total 8688 FLOPs per token.
    shape = TransformerShape.from_config(SMALL)
    count = flops.count_params(shape)
    assert count.per_layer == 600
    assert count.non_embedding == 1208
    assert count.flops_params == 1288
    assert count.total == 1288  # embedding 80 + 1208, the tied lm_head not twice
    assert flops.training_flops_per_token(shape, seq_len=5) == 8688


def test_head_dim_defaults_to_hidden_over_heads_and_kv_heads_to_heads():
    cfg = {k: v for k, v in SMALL.items() if k not in ("head_dim", "num_key_value_heads")}
    shape = TransformerShape.from_config(cfg)
    assert (shape.head_dim, shape.kv_heads) == (4, 2)
    # k and v now have two heads: 8x8 each instead of 8x4, +64 per layer
    assert flops.count_params(shape).per_layer == 600 + 64


def test_shipped_tiny_model_counts_match_its_real_parameters():
    from transformers import AutoModelForCausalLM

    from afbench.assets.manifest import default_assets_dir

    folder = default_assets_dir() / "qwen3_tiny"
    config = json.loads((folder / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder)
    real = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    count = flops.count_params(TransformerShape.from_config(config))
    assert config["tie_word_embeddings"] is True
    assert count.total == real
    assert count.non_embedding == real - embedding
    # tied: torchtitan's nparams_for_matmul is every parameter (the table does the lm_head matmul)
    assert count.flops_params == real


def test_untied_model_with_attention_bias_counts_match_transformers():
    torch = pytest.importorskip("torch")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = {**SMALL, "tie_word_embeddings": False, "attention_bias": True}
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**cfg))
    real = sum(p.numel() for p in model.parameters())
    embedding = model.model.embed_tokens.weight.numel()
    lm_head = model.lm_head.weight.numel()
    count = flops.count_params(TransformerShape.from_config(cfg))
    assert count.total == real
    assert count.non_embedding == real - embedding - lm_head
    # untied: torchtitan's nparams_for_matmul is nparams minus the nn.Embedding table
    assert count.flops_params == real - embedding


@pytest.mark.parametrize(
    ("config", "total_b", "non_embedding_b"),
    [
        # Qwen's model cards: "Number of Parameters 8.2B, Number of Parameters (Non-Embedding) 6.95B"
        (QWEN3_8B, 8.2, 6.95),
        # "1.7B, Non-Embedding 1.4B"
        (QWEN3_1_7B, 1.7, 1.4),
    ],
)
def test_published_qwen3_parameter_counts(config, total_b, non_embedding_b):
    count = flops.count_params(TransformerShape.from_config(config))
    assert count.total / 1e9 == pytest.approx(total_b, abs=0.05)
    assert count.non_embedding / 1e9 == pytest.approx(non_embedding_b, abs=0.01)


def test_attention_term_grows_linearly_with_seq_len():
    shape = TransformerShape.from_config(QWEN3_1_7B)
    short, long = (flops.training_flops_per_token(shape, t) for t in (1024, 2048))
    assert long - short == 12 * 28 * 16 * 128 * 1024


def test_achieved_tflops_and_mfu():
    # 2,000 tokens/s on one device at 1e10 FLOPs per token: 2e13 FLOP/s = 20 TFLOPs;
    # against a 312 TFLOPs peak that is 6.41 %.
    tflops = flops.achieved_tflops(2000.0, 1e10)
    assert tflops == pytest.approx(20.0)
    assert flops.mfu_pct(tflops, 312.0) == pytest.approx(100 * 20 / 312)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
    ],
)
def test_published_peaks_are_recognised_by_device_name(name, peak):
    assert flops.published_peak_tflops(name)[0] == peak
    assert flops.resolve_peak_tflops(None, name, "bfloat16")[0] == peak


@pytest.mark.parametrize("name", ["NVIDIA H20", "Ascend910B3", "x86_64", "NVIDIA GeForce RTX 4090"])
def test_unknown_devices_get_no_peak_and_say_which_key_to_set(name):
    peak, why = flops.resolve_peak_tflops(None, name, "bfloat16")
    # a catalog sentence as plain data (labels.yaml words it: "... set backend.peak_tflops")
    assert peak is None and why == {"key": "peak_unknown_device", "args": {"device": repr(name)}}


def test_float32_model_gets_no_bf16_peak_but_a_configured_peak_always_wins():
    peak, why = flops.resolve_peak_tflops(None, "NVIDIA H100 80GB HBM3", "float32")
    assert peak is None and why["key"] == "peak_other_dtype" and why["args"]["dtype"] == "float32"
    assert flops.resolve_peak_tflops(313.0, "Ascend910B3", "float32") == (
        313.0,
        {"key": "peak_configured", "args": {}},
    )


def test_kv_cache_of_qwen3_8b_by_hand():
    # 2 (K, V) x 36 layers x 8 KV heads x 128 x (256 prompt + 64 new) x batch 1 x 2 bytes (bf16)
    shape = TransformerShape.from_config(QWEN3_8B)
    assert flops.kv_cache_bytes(shape, 320, 1, 2) == 2 * 36 * 8 * 128 * 320 * 2 == 47_185_920
    assert flops.kv_cache_bytes(shape, 320, 4, 2) == 4 * 47_185_920


def test_missing_config_key_is_named():
    cfg = {k: v for k, v in SMALL.items() if k != "intermediate_size"}
    with pytest.raises(ModelConfigError, match=r"m/config.json: missing intermediate_size"):
        TransformerShape.from_config(cfg, "m/config.json")


def test_non_integer_size_is_named():
    with pytest.raises(ModelConfigError, match=r"hidden is '8'; expected a positive integer"):
        TransformerShape.from_config({**SMALL, "hidden_size": "8"})
