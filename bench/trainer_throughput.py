"""Benchmark: afbench's builtin SFT loop vs ``transformers.Trainer``, tokens/s, one process.

Both train the shipped tiny Qwen3 (assets/qwen3_tiny, fp32, sdpa) on the same packed blocks
(afbench.engines.data: chat template, assistant-only labels, packed to seq_len), in the same
order (afbench's BatchOrder with the same seed), with the same batch size, seq_len, AdamW
(lr 1e-4, weight decay 0, constant lr), grad-norm clipping at 1.0, and 2 torch threads, at each
``--seq-lens`` length. Each side uses its own default AdamW implementation: afbench's
``scheduler.optimizer_impl`` (fused) and Trainer's ``optim`` default (``adamw_torch_fused`` for
torch >= 2.8, transformers' training_args.py): the Trainer a user would otherwise run. A =
``afbench.engines.sft.run_sft`` (the real builtin engine, called in-process
on a RunSpec composed from conf/ like the CLI does); B = ``Trainer.train()`` with everything but
the step loop turned off (report_to none, save/eval/logging strategy no, no tqdm, no metrics
printer, dataloader workers 0).

Interleaving is per step: A and B run in two threads of this process that hand a baton to each
other at the end of every step (afbench: when its step line is printed; Trainer:
``on_step_end``), so exactly one of them computes at any time and the steps go A B A B ...;
a burst of someone else's load on the machine hits both alike. A step's time runs from getting
the baton to the end of the step (everything the loop does per step: data, forward/backward,
clipping, optimizer, its logging). Each round loads fresh models; the first ``--warmup`` steps
of each side are excluded. tokens/s = tokens per step / median step time of that side (the
mean-based figure is printed too). The headline ratio is the median over step pairs of
(Trainer step i time / afbench step i time): the two steps of a pair ran back to back, so a
change of load between pairs cancels. Target: afbench/Trainer tokens/s ratio >= 1.02 at
every length, with identical step-1 losses.

    .venv/bin/python bench/trainer_throughput.py [--rounds 3] [--steps 20] [--warmup 2] [--seq-lens 256,1024]
"""

from __future__ import annotations

import argparse
import gc
import importlib.resources
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common as C

THREADS = 2
TARGET_RATIO = 1.02


class Baton:
    """Two parties take turns; a party that finished never blocks the other."""

    def __init__(self, first: str) -> None:
        self.cond = threading.Condition()
        self.turn = first
        self.done: set[str] = set()

    def wait_turn(self, me: str, other: str) -> None:
        with self.cond:
            while self.turn != me and other not in self.done:
                self.cond.wait()

    def hand_over(self, me: str, other: str) -> None:
        with self.cond:
            self.turn = other
            self.cond.notify_all()
        self.wait_turn(me, other)

    def finish(self, me: str, other: str) -> None:
        with self.cond:
            self.done.add(me)
            self.turn = other
            self.cond.notify_all()


class Side:
    """Per-step start (baton received) and end times of one loop."""

    def __init__(self, name: str, other: str, baton: Baton) -> None:
        self.name, self.other, self.baton = name, other, baton
        self.starts: list[float] = []
        self.ends: list[float] = []

    def step_ended(self) -> None:
        self.ends.append(time.perf_counter())
        self.baton.hand_over(self.name, self.other)
        self.starts.append(time.perf_counter())

    def step_times(self, warmup: int) -> list[float]:
        """Seconds of steps warmup+1..N: baton received after step k-1 -> end of step k
        (``starts[j]`` / ``ends[j]`` belong to step j+1)."""
        return [end - start for start, end in zip(self.starts[warmup:], self.ends[warmup:])]


class StepLines(io.TextIOBase):
    """sys.stdout during a round: afbench's step line ends a step of side A."""

    def __init__(self, side: Side) -> None:
        self.side = side

    def write(self, text: str) -> int:
        if text.startswith("step:") and threading.current_thread().name == "afbench":
            self.side.step_ended()
        return len(text)


def compose_spec(run_dir: Path, steps: int, seq_len: int):
    """The RunSpec the CLI would make for ``backend=cpu`` with ``steps`` and ``seq_len``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from afbench.cli import register
    from afbench.config.validate import validate_config
    from afbench.plan import make_plan

    register()
    GlobalHydra.instance().clear()
    conf_dir = str(importlib.resources.files("afbench.conf"))
    with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "backend=cpu",
                f"backend.num_threads={THREADS}",
                f"scheduler.steps={steps}",
                f"scheduler.seq_len={seq_len}",
                "scheduler.measure.first_step=1",
                f"scheduler.measure.last_step={steps}",
            ],
        )
    GlobalHydra.instance().clear()
    plan = make_plan(validate_config(cfg), run_dir)
    return plan.runs[0]


def make_trainer(spec, inputs, labels, out: Path, side: Side, losses: list[float]):
    """transformers.Trainer on the same blocks, order and settings as afbench's loop."""
    import torch
    from torch.utils.data import IterableDataset
    from transformers import (
        AutoModelForCausalLM,
        PrinterCallback,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from afbench.engines import data as chat
    from afbench.engines.common import seed_everything

    cfg = spec.config
    s = cfg.scheduler

    class SameOrder(IterableDataset):
        """The rows afbench's BatchOrder hands out, in its order (one block per item)."""

        def __iter__(self):
            order = chat.BatchOrder(inputs.shape[0], s.seed)
            for _ in range(s.steps):
                for i in order.take(s.micro_batch_size):
                    yield {"input_ids": inputs[i], "labels": labels[i]}

    class Turns(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            side.baton.wait_turn(side.name, side.other)
            side.starts.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            side.step_ended()

    class LossTrainer(Trainer):
        def training_step(self, *a, **kw):
            loss = super().training_step(*a, **kw)
            losses.append(float(loss))  # afbench's loop makes the same host sync per step
            return loss

    seed_everything(s.seed)
    model = AutoModelForCausalLM.from_pretrained(
        cfg.model.path,
        dtype=torch.float32,
        attn_implementation=cfg.model.attn_implementation,
        local_files_only=True,
    )
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=s.steps,
        per_device_train_batch_size=s.micro_batch_size,
        gradient_accumulation_steps=s.global_batch_size // s.micro_batch_size,
        learning_rate=s.lr,
        weight_decay=s.weight_decay,
        max_grad_norm=s.max_grad_norm,
        lr_scheduler_type="constant",
        warmup_steps=0,
        seed=s.seed,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        bf16=False,
        fp16=False,
    )
    trainer = LossTrainer(model=model, args=args, train_dataset=SameOrder(), callbacks=[Turns()])
    trainer.remove_callback(PrinterCallback)  # it prints the end-of-train metrics dict
    return trainer


def one_round(spec, backend, inputs, labels, work: Path, k: int):
    """Both loops side by side, alternating steps; returns (side A, side B, A's own
    step_time_s, A's step-1 loss, B's step-1 loss, the AdamW implementation of each)."""
    from afbench.engines.sft import run_sft

    baton = Baton(first="afbench")
    a = Side("afbench", "trainer", baton)
    b = Side("trainer", "afbench", baton)
    a.starts.append(float("nan"))  # step 1 of A starts after its setup; it is never measured
    run_dir = work / f"afbench-{k}"
    run_dir.mkdir()
    spec_k = spec.model_copy(update={"run_dir": str(run_dir)})
    b_losses: list[float] = []
    errors: list[BaseException] = []
    impls: dict[str, str] = {}

    def run_a() -> None:
        try:
            opt = run_sft(spec_k, backend, run_dir)["optimizer"]
            impls["afbench"] = opt["impl"] + (f" ({opt['reason']})" if opt["reason"] else "")
        except BaseException as exc:  # noqa: BLE001  (re-raised in the main thread)
            errors.append(exc)
        finally:
            baton.finish("afbench", "trainer")

    def run_b() -> None:
        try:
            # from_pretrained is not thread-safe (a process-wide meta-device context): load
            # only once A has finished its setup and first step and handed the baton over
            baton.wait_turn("trainer", "afbench")
            trainer = make_trainer(spec, inputs, labels, work / f"trainer-{k}", b, b_losses)
            impls["trainer"] = str(getattr(trainer.args.optim, "value", trainer.args.optim))
            trainer.train()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            baton.finish("trainer", "afbench")

    stdout = sys.stdout
    sys.stdout = StepLines(a)
    try:
        threads = [
            threading.Thread(target=run_a, name="afbench"),
            threading.Thread(target=run_b, name="trainer"),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.stdout = stdout
    if errors:
        raise errors[0]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    own = [r["step_time_s"] for r in records if r.get("kind") == "step"]
    first_a = next(r["loss"] for r in records if r.get("kind") == "step")
    return a, b, own, first_a, b_losses[0], impls


def measure_length(seq_len: int, args: argparse.Namespace, work: Path, backend) -> dict:
    """Both loops at one ``seq_len``, ``args.rounds`` rounds; prints per-round lines and the
    results block, returns the headline figures."""
    import torch
    from transformers import AutoTokenizer

    from afbench.engines import data as chat

    spec = compose_spec(work / f"plan-{seq_len}", args.steps, seq_len)
    cfg, s = spec.config, spec.config.scheduler
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path, local_files_only=True)
    convs = chat.load_conversations(cfg.data.path, cfg.data.max_samples)
    markers = chat.assistant_markers(tokenizer)
    inputs, labels = chat.pack(
        [chat.tokenize_conversation(tokenizer, c, markers) for c in convs], s.seq_len
    )
    tokens_per_step = s.global_batch_size * s.seq_len
    print(
        f"\n== seq_len {s.seq_len}: {inputs.shape[0]} packed blocks; batch "
        f"{s.global_batch_size} x seq {s.seq_len} = {tokens_per_step} tokens/step; "
        f"{args.rounds} rounds x {args.steps} steps per side, alternating A B A B per step, "
        f"first {args.warmup} of each side excluded; {torch.get_num_threads()} threads"
    )

    a_steps: list[float] = []
    b_steps: list[float] = []
    a_own: list[float] = []
    first_losses = []
    round_ratios = []
    impls: dict[str, str] = {}
    for k in range(1, args.rounds + 1):
        a, b, own, loss_a, loss_b, impls = one_round(
            spec, backend, inputs, labels, work / f"len{seq_len}", k
        )
        ta, tb = a.step_times(args.warmup), b.step_times(args.warmup)
        a_steps += ta
        b_steps += tb
        a_own += own[args.warmup :]
        first_losses.append((loss_a, loss_b))
        round_ratios.append(statistics.median(tb) / statistics.median(ta))
        gc.collect()
        print(
            f"round {k}: afbench {tokens_per_step / statistics.median(ta):6.0f} tok/s "
            f"(median {statistics.median(ta) * 1e3:.0f} ms/step) | Trainer "
            f"{tokens_per_step / statistics.median(tb):6.0f} tok/s (median "
            f"{statistics.median(tb) * 1e3:.0f} ms/step) | step-1 loss {loss_a:.6f} vs "
            f"{loss_b:.6f} | {C.load_line('')[2:]}",
            flush=True,
        )

    med_a, med_b = statistics.median(a_steps), statistics.median(b_steps)
    tps_a, tps_b = tokens_per_step / med_a, tokens_per_step / med_b
    mean_a = tokens_per_step * len(a_steps) / sum(a_steps)
    mean_b = tokens_per_step * len(b_steps) / sum(b_steps)
    # paired by position: step i of A ran right before step i of B, under the same load
    pairs = sorted(tb_i / ta_i for ta_i, tb_i in zip(a_steps, b_steps))
    q = statistics.quantiles(pairs, n=4)
    loss_diff = max(abs(x - y) for x, y in first_losses)
    print(f"-- results, seq_len {s.seq_len} --")
    print(
        f"AdamW: afbench {impls.get('afbench')} (scheduler.optimizer_impl default), Trainer "
        f"{impls.get('trainer')} (TrainingArguments.optim default)"
    )
    print(
        f"afbench builtin loop: {tps_a:.0f} tokens/s at the median step ({med_a * 1e3:.1f} ms, "
        f"{len(a_steps)} steps; its own step_time_s median {statistics.median(a_own) * 1e3:.1f} "
        f"ms); {mean_a:.0f} tokens/s over total time"
    )
    print(
        f"transformers.Trainer: {tps_b:.0f} tokens/s at the median step ({med_b * 1e3:.1f} ms, "
        f"{len(b_steps)} steps); {mean_b:.0f} tokens/s over total time"
    )
    print(f"same work check: step-1 loss afbench vs Trainer, max |diff| {loss_diff:.2e}")
    print(
        "per-round ratio (Trainer/afbench median step time): "
        + ", ".join(f"{r:.3f}" for r in round_ratios)
    )
    paired = statistics.median(pairs)
    print(
        f"paired steps (Trainer step i / afbench step i): median {paired:.3f}, "
        f"interquartile {q[0]:.3f}..{q[2]:.3f}, {sum(p >= 1 for p in pairs)}/{len(pairs)} "
        "favour afbench"
    )
    print(
        f"ratio afbench/Trainer tokens/s: over total time {mean_a / mean_b:.3f}, of the median "
        f"steps {tps_a / tps_b:.3f}, paired (the headline) {paired:.3f}",
        flush=True,
    )
    return {
        "seq_len": s.seq_len,
        "tps_a": tps_a,
        "tps_b": tps_b,
        "paired": paired,
        "iqr": (q[0], q[2]),
        "loss_diff": loss_diff,
        "impls": impls,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds, fresh models each (default 3)")
    ap.add_argument("--steps", type=int, default=20, help="steps per side per round (default 20)")
    ap.add_argument(
        "--warmup", type=int, default=2, help="steps excluded per side and round (default 2, >= 1)"
    )
    ap.add_argument(
        "--seq-lens",
        default="256,1024",
        help="comma-separated sequence lengths, each measured paired (default 256,1024)",
    )
    args = ap.parse_args(argv)
    if not 1 <= args.warmup < args.steps - 1:
        ap.error("need 1 <= --warmup < --steps - 1")
    lengths = [int(x) for x in args.seq_lens.split(",") if x.strip()]

    t_start = time.perf_counter()
    C.header("bench/trainer_throughput.py", argv)
    import accelerate
    import torch
    import transformers
    import transformers.utils.logging as hf_logging

    from afbench.backends.resolve import get_backend

    hf_logging.disable_progress_bar()  # "Loading weights" bars: noise in the output
    work = Path(tempfile.mkdtemp(prefix="afbench-trainer-"))
    backend = get_backend("cpu", THREADS)  # sets torch threads for the whole process
    torch.set_num_threads(THREADS)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate "
        f"{accelerate.__version__}, {THREADS} threads; model assets/qwen3_tiny fp32 sdpa"
    )
    rows = []
    for seq_len in lengths:
        (work / f"len{seq_len}").mkdir(parents=True)
        rows.append(measure_length(seq_len, args, work, backend))

    print("\n-- side by side --")
    print(
        f"{'seq_len':>7}  {'afbench tok/s':>13}  {'Trainer tok/s':>13}  {'paired ratio':>12}  "
        f"{'interquartile':>13}  {'step-1 |diff|':>13}  AdamW afbench / Trainer"
    )
    for r in rows:
        print(
            f"{r['seq_len']:>7}  {r['tps_a']:>13.0f}  {r['tps_b']:>13.0f}  {r['paired']:>12.3f}  "
            f"{r['iqr'][0]:>6.3f}..{r['iqr'][1]:<5.3f}  {r['loss_diff']:>13.2e}  "
            f"{r['impls'].get('afbench')} / {r['impls'].get('trainer')}"
        )
    met = all(r["paired"] >= TARGET_RATIO and r["loss_diff"] == 0 for r in rows)
    print(
        f"target: paired afbench/Trainer tokens/s >= {TARGET_RATIO} at every length with "
        f"identical step-1 losses: {C.verdict_mark(met)}"
    )
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    C.footer(t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
