"""Preflight refuses an input that would fail every run, in one line naming the file (issue
34): a model folder without loadable weights or a tokenizer, a weight index whose shards do
not all exist, a chat parquet without a usable row, an empty prompts file."""

from __future__ import annotations

from afbench import preflight
from afbench.config.models import InferScheduler
from afbench.preflight import run_preflight
from test_preflight import REPO_ASSETS, _check_data, conf, failed, with_section  # noqa: F401


def _model_without_weights(tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(REPO_ASSETS / "qwen3_tiny", model)
    for f in [*model.glob("*.safetensors"), *model.glob("*.bin"), *model.glob("*.index.json")]:
        f.unlink()
    return model


def test_a_model_folder_without_weights_fails_in_seconds_naming_the_folder(conf, tmp_path):
    """issue 34: config.json and tokenizer but no weight file passed preflight and failed 7
    runs after 9.4 minutes."""
    model = _model_without_weights(tmp_path)
    checks = run_preflight(
        with_section(conf, "model", path=str(model), manifest=None), tmp_path / "out"
    )
    (bad,) = [c for c in checks if not c.ok]
    assert bad.item == "model.path" and str(model) in bad.current
    assert "no weight file" in bad.current and bad.line().startswith("[FAIL] model.path:")


def test_a_model_folder_without_a_tokenizer_and_an_empty_prompts_file_fail(conf, tmp_path):
    model = _model_without_weights(tmp_path)
    (model / "model.safetensors").write_bytes(b"x")
    assert preflight.check_model(model).ok
    (model / "tokenizer.json").unlink()
    c = preflight.check_model(model)
    assert (
        not c.ok
        and c.current
        == f"{model} has no tokenizer file (tokenizer.json / tokenizer.model / vocab.json)"
    )
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n")
    infer = conf.model_copy(update={"scheduler": InferScheduler()})
    infer = with_section(infer, "data", prompts_file=str(prompts))
    c = failed(preflight.check_assets(infer), "data.prompts_file")
    assert c.current == f"{prompts} is empty"


def test_a_weight_index_passes_only_when_every_shard_exists(tmp_path):
    import json

    model = _model_without_weights(tmp_path)
    index = model / "model.safetensors.index.json"
    index.write_text(
        json.dumps(
            {
                "weight_map": {
                    "a": "model-00001-of-00002.safetensors",
                    "b": "model-00002-of-00002.safetensors",
                }
            }
        )
    )
    (model / "model-00001-of-00002.safetensors").write_bytes(b"x")
    c = preflight.check_model(model)
    assert not c.ok and "1 missing" in c.current
    assert "model-00002-of-00002.safetensors" in c.current
    (model / "model-00002-of-00002.safetensors").write_bytes(b"x")
    assert preflight.check_model(model).ok
    # the command engine's program loads its own model: config.json is all that is checked
    index.unlink()
    assert preflight.check_model(model, weights=False).ok


def test_an_empty_parquet_or_one_without_conversations_fails_naming_the_file(compose_cfg, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    msgs = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"messages": pa.array([], type=msgs)}), empty)
    c = _check_data(compose_cfg, empty)
    assert not c.ok and str(empty) in c.current and "no row" in c.current
    blank = tmp_path / "blank.parquet"
    pq.write_table(pa.table({"messages": pa.array([[], None], type=msgs)}), blank)
    assert not _check_data(compose_cfg, blank).ok
    one = tmp_path / "one.parquet"
    pq.write_table(
        pa.table({"messages": pa.array([[], [{"role": "user", "content": "hi"}]], type=msgs)}), one
    )
    c = _check_data(compose_cfg, one)
    assert c.ok and "(1 rows)" in c.current
