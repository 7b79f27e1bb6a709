"""The objective study's pretraining at a GPU scale, timed step by step on the JAX backend.

A whole `bertology study --scale small` pretrains eleven arms for a BERT-Small
budget each (hours), more than a short lease of a GPU holds; its pretraining
time is the sum over arms of steps x time per step, and both are measured
here. `prepare` runs the study's own planning on this machine (TensorFlow): each
arm's tokenizer, one batch of its own instances and masking, and its FLOPs per
step, which fix its number of steps at equal compute. `time` trains each arm's
pretrainer on its batch on the JAX backend (the GPU machine has no TensorFlow)
and times the steps after the first ones (XLA compilation). `report` writes the
table of both and the projected pretraining time.

    python -m benchmarks.bench_study_gpu prepare --scale small --out .study_gpu  # here
    python -m benchmarks.bench_study_gpu time .study_gpu --out OUT               # on the GPU, KERAS_BACKEND=jax
    python -m benchmarks.bench_study_gpu report OUT/study_gpu_times.json         # here
"""

import argparse
import dataclasses
import json
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.peer_timing import StepClock, keras_callback

PLAN = "plan.json"
TIMES = "study_gpu_times.json"
DEFAULT_RESULTS = Path(__file__).resolve().parent / "results"


def prepare(scale_name, arm_names, out, vocab_size, tasks=None):
    """Each arm's plan (family, config, options, steps at equal compute) and one batch, under `out`,
    pretraining on the unlabeled text of `tasks` (None: the study's)."""
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.models.registry import get_family
    from keras_bertology.study.arms import ARMS
    from keras_bertology.study.compute import (
        PROBE_STEPS, arm_tokenizer, probe_step, read_documents, shared_vocabulary, write_task_text)
    from keras_bertology.study.options import StudyOptions
    from keras_bertology.study.run import ArmRun
    from keras_bertology.study.steps import arm_pretrain_options

    options = StudyOptions(scale=scale_name, arms=tuple(arm_names), vocab_size=vocab_size)
    if tasks:
        options.tasks = tuple(tasks)
    scale = options.validate()
    out.mkdir(parents=True, exist_ok=True)
    tasks = [load_task(task, scale.finetune_max_examples) for task in options.tasks]
    options = dataclasses.replace(options, corpus=[str(write_task_text(tasks, out))], corpus_format="jsonl")
    documents = read_documents(options)
    arms = [next(arm for arm in ARMS if arm.name == name) for name in options.arms]
    for arm in arms:
        if arm.depends_on:  # its step needs another arm's trained run (a teacher): timed by the study itself
            print(f"{arm.name}: left out (it trains from the {', '.join(arm.depends_on)} arm's run)", flush=True)
    arms = [arm for arm in arms if not arm.depends_on]
    probes, shared = {}, shared_vocabulary(options, out, documents)
    for arm in arms:
        family = get_family(arm.model)
        probe = arm_pretrain_options(options, scale, arm, steps=PROBE_STEPS, out=None)
        tokenizer = arm_tokenizer(family, documents, probe, out / "tokenizers" / arm.name, shared=shared)
        average, stages, batch = probe_step(family, tokenizer, documents, probe)
        np.savez(out / f"{arm.name}.npz", **_flat(batch))
        probes[arm.name] = (probe, family, tokenizer.vocab_size, {"average": average, "stages": stages})
        print(f"{arm.name}: {average:.3g} FLOPs a step", flush=True)
    budget = scale.reference_steps * probes[arms[0].name][3]["average"]
    plan = {"scale": scale_name, "encoder": scale.describe(), "batch_size": scale.batch_size, "budget_flops": budget,
            "arms": {}}
    for arm in arms:
        probe, family, vocab, cost = probes[arm.name]
        run = ArmRun(arm, budget, cost, scale)
        plan["arms"][arm.name] = {"model": arm.model, "preset": arm.preset, "steps": run.steps,
                                  "flops_per_step": cost["average"], "vocab_size": vocab,
                                  "config": probe.backbone_config(family, vocab_size=vocab),
                                  "family_options": arm.options_for(run.steps) or {}}
    (out / PLAN).write_text(json.dumps(plan, indent=1), encoding="utf-8")
    return plan


def _flat(batch):
    """(x, y, sample_weight) of dicts or arrays as one flat dict, "x/name" or "x"."""
    flat = {}
    for part, value in zip("xyw", batch):
        if isinstance(value, dict):
            flat.update({f"{part}/{name}": array for name, array in value.items()})
        elif value is not None:
            flat[part] = value
    return flat


def _unflat(arrays):
    parts = {}
    for key in arrays.files:
        part, _, name = key.partition("/")
        if name:
            parts.setdefault(part, {})[name] = arrays[key]
        else:
            parts[part] = arrays[key]
    return tuple(parts.get(part) for part in "xyw")


def time_arms(folder, out, precision, warmup, steps):
    """Train each planned arm on its batch (repeated) and time `steps` steps after `warmup`; the
    results are written after each arm, so that a run cut short keeps the arms it finished."""
    import keras

    from keras_bertology.models.registry import get_family
    from keras_bertology.engine.optimization import bert_adamw

    plan = json.loads((folder / PLAN).read_text(encoding="utf-8"))
    results = {"plan": plan, "precision": precision, "backend": keras.config.backend(), "device": _device(),
               "warmup_steps": warmup, "timed_steps": steps, "arms": {}}
    out.mkdir(parents=True, exist_ok=True)
    for name, arm in plan["arms"].items():
        keras.backend.clear_session()
        keras.config.set_dtype_policy(precision)
        family = get_family(arm["model"])
        backbone = family.backbone_cls(**arm["config"], dtype=precision)
        pretrainer = family.build_pretrainer(backbone, arm["family_options"], arm["preset"], plan["batch_size"])
        pretrainer.compile(optimizer=bert_adamw(1e-4, arm["steps"]))  # the study's optimizer
        x, y, weights = _unflat(np.load(folder / f"{name}.npz"))
        clock = StepClock(warmup)
        started = time.perf_counter()
        pretrainer.fit(_repeat(x, y, weights), steps_per_epoch=warmup + steps, epochs=1, shuffle=False, verbose=0,
                       callbacks=[keras_callback(clock), *pretrainer.training_callbacks()])
        timing = clock.result(steps, plan["batch_size"], len(keras.tree.flatten(x)[0][0]))
        timing["fit_seconds"] = time.perf_counter() - started
        timing["projected_seconds"] = arm["steps"] * timing["ms_per_step"] / 1000
        results["arms"][name] = timing
        print(f"{name}: {timing['ms_per_step']:.1f} ms a step, {arm['steps']} steps: "
              f"{timing['projected_seconds'] / 60:.1f} min (compiling: {timing['warmup_s']:.0f} s)", flush=True)
        (out / TIMES).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def _repeat(x, y, weights):
    while True:
        yield x, y, weights


def _device():
    import jax

    device = jax.devices()[0]
    return {"kind": device.device_kind, "platform": device.platform,
            "compute_capability": getattr(device, "compute_capability", None),
            "host": platform.processor() or platform.machine()}


def report(times_path, results_dir):
    """results_dir/study_<scale>_gpu.{json,md}: the measured step times and the projected pretraining."""
    results = json.loads(Path(times_path).read_text(encoding="utf-8"))
    plan = results["plan"]
    rows, total = [], 0.0
    for name, arm in plan["arms"].items():
        timing = results["arms"].get(name)
        if timing is None:  # a run cut short
            rows.append(f"| {name} | {arm['steps']:,} | {arm['flops_per_step']:.3g} | - | - | not measured |")
            continue
        total += timing["projected_seconds"]
        rows.append(f"| {name} | {arm['steps']:,} | {arm['flops_per_step']:.3g} | {timing['ms_per_step']:.1f} | "
                    f"{timing['samples_per_sec']:,.0f} | {timing['projected_seconds'] / 60:.1f} |")
    device = results["device"]
    lines = [f"# The study's pretraining at scale `{plan['scale']}` on {device['kind']} ({results['backend']}, "
             f"{results['precision']})", "",
             f"{plan['encoder']}; each arm's steps spend the budget of {plan['budget_flops']:.3g} FLOPs. Step times: "
             f"{results['timed_steps']} steps after {results['warmup_steps']} (compilation), on one batch of the "
             "arm's own data repeated, each step's loss read back as the run's own logging reads it; an arm of "
             "several stages (the two-stage ELECTRA) is timed in its first.", "",
             "| arm | steps | FLOPs a step | ms a step | samples/s | pretraining, min |",
             "|---|---|---|---|---|---|", *rows, "",
             f"Pretraining, one arm after another: **{total / 60:.0f} min** for the arms measured.", ""]
    name = f"study_{plan['scale']}_gpu"
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{name}.json").write_text(json.dumps(dict(results, projected_pretraining_seconds=total),
                                                         indent=1), encoding="utf-8")
    (results_dir / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser("prepare", help="each arm's plan and batch (TensorFlow)")
    prep.add_argument("--scale", default="small")
    prep.add_argument("--arms", nargs="+", default=None)
    prep.add_argument("--vocab-size", type=int, default=8000)
    prep.add_argument("--tasks", nargs="+", default=None, help="as bertology study --tasks")
    prep.add_argument("--out", type=Path, required=True)
    timing = commands.add_parser("time", help="time each arm's steps (JAX)")
    timing.add_argument("folder", type=Path)
    timing.add_argument("--out", type=Path, required=True)
    timing.add_argument("--precision", default="mixed_bfloat16", choices=("mixed_bfloat16", "float32"))
    timing.add_argument("--warmup", type=int, default=20)
    timing.add_argument("--steps", type=int, default=200)
    rep = commands.add_parser("report", help="the table and the projection")
    rep.add_argument("times", type=Path)
    rep.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        from keras_bertology.study.arms import ARM_NAMES

        prepare(args.scale, args.arms or ARM_NAMES, args.out, args.vocab_size, args.tasks)
    elif args.command == "time":
        time_arms(args.folder, args.out, args.precision, args.warmup, args.steps)
    else:
        report(args.times, args.results)


if __name__ == "__main__":
    main()
