"""The study's second evaluation: linear probes of every arm at every budget point, and of each arm's control.

Fine-tuning scores move with the head's seed and the few labels drawn; a probe on frozen states has no
fine-tuning to vary, so every seed is cheap and the noise is the draw of its training examples alone
(keras_bertology/probing.py). Each arm's control is its own architecture and vocabulary randomly
initialised (seed s draws both its weights and its probe's examples), the floor of what a probe reads from
word identities and positions.
"""

import time
from pathlib import Path

import keras

from keras_bertology import probing
from keras_bertology.study.report import control_key

# The built-in tasks a study probes when none of its own can be: words of proper nouns in lower-cased text,
# whose capitals are gone, and the topics of whole articles.
PROBE_TASKS = ("bbc-names", "bbc-news")


def probe_key(key, task, seed):
    """The study.json key of one probe: an encoder (a point's key, or a control's), a task and a seed."""
    return f"{key}/{Path(task).name}/seed-{seed}"


def probe_jobs(runs, tasks, seed_count, out):
    """[(key, run folder, seeds, control seed or None)]: every point of every arm, its states read once for
    all the seeds; each arm's control once a seed (the seed draws its weights too)."""
    reference = runs[0].arm.name
    seeds = tuple(range(seed_count))
    jobs = [(point.key, point.folder(out), seeds, None) for run in runs for point in run.points]
    return jobs + [(control_key(run.arm.name, reference), run.points[-1].folder(out), (seed,), seed)
                   for run in runs for seed in seeds]


def probe_all(options, scale, runs, state, out, workers, say, loaded):
    """Every probe of `probe_jobs` not done yet, each recorded in study.json as its encoder's job ends, on
    the study's tasks that a probe reads (`loaded`: {task: TaskData}; tagged words, one labelled text per
    example), or on the built-in PROBE_TASKS when none is; returns the tasks."""
    tasks = [task for task, data in loaded.items() if probing.readable(data)] or list(PROBE_TASKS)
    state.setdefault("probe", {})
    todo = [job for job in probe_jobs(runs, tasks, options.seed_count, out)
            if any(probe_key(job[0], task, seed) not in state["probe"] for task in tasks for seed in job[2])]

    def done(job, results):
        state["probe"].update(results)
        state.save()
        by_task = {}
        for key, result in results.items():
            by_task.setdefault(key.split("/")[-2], []).append(result["mix"])
        say(options, f"[probe {job[1]}" + ("" if job[4] is None else f", seed {job[4]}") + "] "
                     + "; ".join(f"{task} mix {sum(mixes) / len(mixes):.3f}" + (f" (mean of {len(mixes)} seeds)"
                                                                               if len(mixes) > 1 else "")
                                 for task, mixes in by_task.items()))

    workers.run_all(_probe, [(scale, *job, tasks) for job in todo], done)
    return tasks


def _probe(scale, key, run_dir, seeds, control_seed, tasks):
    """One encoder's probes (in a worker): {probe_key: result} of each task and seed. The encoder of
    `run_dir`, or with `control_seed` its architecture drawn anew by that seed."""
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.models.registry import get_family
    from keras_bertology.runs import load_run_model

    run = load_run_model(run_dir)
    backbone = run.backbone if control_seed is None else probing.random_control(run.backbone, control_seed)
    results = {}
    for task in tasks:
        started = time.perf_counter()
        by_seed = probing.probe_seeds(backbone, get_family(run.family), run.tokenizer, run.seq_len, load_task(task),
                                      scale.probe_examples, seeds)
        seconds = (time.perf_counter() - started) / len(seeds)
        results.update({probe_key(key, task, seed): dict(result, seconds=seconds) for seed, result in by_seed.items()})
    keras.backend.clear_session()
    return results


def probe_results(state, runs, tasks, seed_count):
    """results.json's "probing": per task, per encoder (each point, each control): each depth's and the
    mix's macro-F1 over the seeds, the mix's weights averaged, and the mix's gain over the arm's control
    with its gate (a "better" verdict, seed by seed, with "pays")."""
    reference = runs[0].arm.name
    found = {}
    for task in tasks:
        name = Path(task).name
        table = {}
        for run in runs:
            control = control_key(run.arm.name, reference)
            for key in [point.key for point in run.points] + [control]:
                table[key] = probing.summarise([state["probe"][probe_key(key, task, seed)]
                                                for seed in range(seed_count)])
            for point in run.points:
                table[point.key].update(probing.against_control(table[point.key], table[control]))
        found[name] = table
    return found
