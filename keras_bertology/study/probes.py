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
from keras_bertology.study.steps import Progress

# The built-in tasks a study probes when none of its own can be: words of proper nouns in lower-cased text,
# whose capitals are gone, and the topics of whole articles.
PROBE_TASKS = ("bbc-names", "bbc-news")


def probe_key(key, task, seed):
    """The study.json key of one probe: an encoder (a point's key, or a control's), a task and a seed."""
    return f"{key}/{Path(task).name}/seed-{seed}"


def probe_jobs(runs, tasks, seed_count, out):
    """[(key, run folder, seeds, control)]: every point of every arm, its states read once for all the
    seeds; each arm's control, whose weights each seed draws anew (one job an arm: the run is loaded once)."""
    reference = runs[0].arm.name
    seeds = tuple(range(seed_count))
    jobs = [(point.key, point.folder(out), seeds, False) for run in runs for point in run.points]
    return jobs + [(control_key(run.arm.name, reference), run.points[-1].folder(out), seeds, True) for run in runs]


def probe_all(options, scale, runs, state, out, workers, say, loaded):
    """Every probe of `probe_jobs` not done yet, each recorded in study.json as its encoder's job ends, on
    the study's tasks that a probe reads (`loaded`: {task: TaskData}; tagged words, one labelled text per
    example), or on the built-in PROBE_TASKS when none is; returns the tasks."""
    tasks = [task for task, data in loaded.items() if probing.readable(data)] or list(PROBE_TASKS)
    state.setdefault("probe", {})
    todo = []
    for key, folder, seeds, control in probe_jobs(runs, tasks, options.seed_count, out):
        left = tuple(seed for seed in seeds if any(probe_key(key, task, seed) not in state["probe"] for task in tasks))
        if left:
            todo.append((key, folder, seeds if not control else left, control))
    progress = Progress(len(todo), "probes")

    def done(job, results):
        state["probe"].update(results)
        state.save()
        by_task = {}
        for key, result in results.items():
            by_task.setdefault(key.split("/")[-2], []).append(result["mix"])
        say(options, f"[probe {progress.done + 1}/{len(todo)}] {job[1]}" + (" (its control)" if job[4] else "") + ": "
                     + "; ".join(f"{task} mix {sum(mixes) / len(mixes):.3f}" + (f" (mean of {len(mixes)} seeds)"
                                                                               if len(mixes) > 1 else "")
                                 for task, mixes in by_task.items()) + progress.step())

    workers.run_all(_probe, [(scale, *job, tasks) for job in todo], done)
    return tasks


def _probe(scale, key, run_dir, seeds, control, tasks):
    """One encoder's probes (in a worker): {probe_key: result} of each task and seed. The encoder of
    `run_dir`, or with `control` its architecture drawn anew by each seed."""
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.models.registry import get_family
    from keras_bertology.runs import load_run_model

    run = load_run_model(run_dir)
    family, loaded = get_family(run.family), {task: load_task(task) for task in tasks}
    results = {}
    for drawn, backbone in _encoders(run.backbone, seeds, control):
        for task in tasks:
            started = time.perf_counter()
            by_seed = probing.probe_seeds(backbone, family, run.tokenizer, run.seq_len, loaded[task],
                                          scale.probe_examples, drawn)
            seconds = (time.perf_counter() - started) / len(drawn)
            results.update({probe_key(key, task, seed): dict(result, seconds=seconds)
                            for seed, result in by_seed.items()})
    keras.backend.clear_session()
    return results


def _encoders(backbone, seeds, control):
    """(seeds, encoder) to probe: the run's own encoder read once for all `seeds`, or with `control` its
    architecture drawn anew by each seed (each drawn just before it is read)."""
    if not control:
        yield seeds, backbone
        return
    for seed in seeds:
        yield (seed,), probing.random_control(backbone, seed)


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
