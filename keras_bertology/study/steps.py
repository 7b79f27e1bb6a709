"""The steps both axes of `bertology study` run: an arm's FLOPs a step, its pretraining options, and
fine-tuning jobs, each in a worker (study/workers.py), with what a worker process keeps between runs.
"""

import dataclasses
import shutil
import time

import keras

from keras_bertology.finetune.options import FinetuneOptions
from keras_bertology.finetune.shared_work import SharedWork
from keras_bertology.models.registry import get_family
from keras_bertology.study.compute import PROBE_STEPS, arm_tokenizer, probe_step, read_documents, shared_vocabulary
from keras_bertology.study.report import RANDOM_INIT, finetune_key  # noqa: F401  RANDOM_INIT re-exported
from keras_bertology.pretraining.options import PretrainOptions

# What this process keeps between runs (a worker's, or the study's own with one worker): the corpus read
# once, and the fine-tuning runs' SharedWork (a job's seeds share a traced model and encoded splits).
_SHARED = {}


def drop_corpus():
    """Let go of this worker's copy of the corpus, read to count FLOPs."""
    _SHARED.pop("documents", None)


def count_flops(options, scale, arms, state, out, workers):
    """The cost of a step of each arm, on its own data (its tokenizer is kept for its run)."""
    todo = [arm for arm in arms if arm.name not in state["flops_per_step"]]
    if todo:
        say(options, f"counting the FLOPs of a training step of {len(todo)} arms (each trains its tokenizer)")

    def done(job, result):
        state["flops_per_step"][job[2].name] = result
        state.save()
        say(options, f"    {job[2].name}: {result['average']:.3g} FLOPs a step")

    workers.run_all(_arm_flops, [(quiet(options), scale, arm, out) for arm in todo], done)
    drop_corpus()


def _arm_flops(options, scale, arm, out):
    family = get_family(arm.model)
    if "documents" not in _SHARED:  # read once per process
        _SHARED["documents"] = read_documents(options)
    documents = _SHARED["documents"]
    probe = arm_pretrain_options(options, scale, arm, steps=PROBE_STEPS, out=None, study_dir=out)
    context = family.run_context(probe.family_options)
    tokenizer = arm_tokenizer(family, documents, probe, out / "tokenizers" / arm.name, context.tokenizer,
                              shared_vocabulary(options, out, documents))
    average, stages, _ = probe_step(family, tokenizer, documents, probe, context)
    keras.backend.clear_session()
    return {"average": average, "stages": stages}


def quiet(options):
    """The options a run gets: progress bars of runs side by side would interleave, so a worker's run
    reports only its end."""
    return dataclasses.replace(options, verbose=0) if options.workers > 1 else options


def arm_pretrain_options(options, scale, arm, steps, out, snapshots=(), study_dir=None):
    """The `PretrainOptions` of an arm's run of `steps` steps into `out` (None for a probe), in the study
    folder `study_dir`."""
    return PretrainOptions(
        model=arm.model, preset=arm.preset, corpus=options.corpus, corpus_format=options.corpus_format,
        text_field=options.text_field, steps=steps, batch_size=scale.batch_size, seq_len=scale.seq_len,
        out=out, no_export=True, vocab_size=options.vocab_size, masking=arm.masking,
        masking_units=arm.masking_units, seed=options.seed,
        resume=True, family_options=arm.options_for(steps, study_dir), encoder=arm.encoder_for(scale.encoder),
        snapshots=snapshots,
        verbose=options.verbose)


def finetune_all(options, scale, jobs, state, out, workers):
    """Every seed of `jobs` [(key, run folder, random init, task, label count)] not done yet; returns the
    study.json keys of all of them, done before or now."""
    every = [(finetune_key(key, task, labels, seed), run_dir, random_init, task, labels, seed)
             for key, run_dir, random_init, task, labels in jobs for seed in range(options.seed_count)]
    todo = [job for job in every if job[0] not in state["finetune"]]
    progress = Progress(len(todo), "fine-tuning")

    def done(job, result):
        key = job[1]
        state["finetune"][key] = result
        state.save()
        say(options, f"[finetune {progress.done + 1}/{len(todo)}] {key}: test {result['metric']} "
                     f"{result['score']:.4f} ({result['wall_seconds']:.0f} s){progress.step()}")

    workers.run_all(_finetune, [(scale, *job, out) for job in todo], done)
    _SHARED.clear()
    keras.backend.clear_session()
    return [job[0] for job in every]


class Progress:
    """The time left of `total` runs to do in this process, from the pace of the ones done so far."""

    def __init__(self, total, what):
        self.total, self.what, self.done, self.started = total, what, 0, time.perf_counter()

    def step(self):
        self.done += 1
        if self.done >= self.total:
            return ""
        left = (time.perf_counter() - self.started) / self.done * (self.total - self.done)
        return f"; {self.what} left: about {left / 60:.0f} min"


def _finetune(scale, key, run_dir, random_init, task, labels, seed, out):
    """One fine-tuning run on `labels` examples drawn by `seed`, into out/finetune/`key`; a folder an
    interrupted run left is cleared first."""
    from keras_bertology.finetune.run import finetune

    started = time.perf_counter()
    folder = out / "finetune" / key
    if folder.exists():
        shutil.rmtree(folder)
    batch_size, epochs = scale.finetune_recipe(labels)
    results = finetune(FinetuneOptions(
        task=task, from_dir=str(run_dir), epochs=epochs, batch_size=batch_size,
        learning_rate=scale.finetune_learning_rate, seq_len=scale.finetune_seq_len, seed=seed, out=str(folder),
        results_only=True, max_examples=scale.finetune_max_examples, train_examples=labels, last_epoch=True,
        random_init=random_init, summary=scale.finetune_summary, verbose=0), _SHARED.setdefault("work", SharedWork()))
    metric = results["primary_metric"]
    return {"metric": metric, "score": results["test"][metric], "dev": results["dev"][metric],
            "seconds": results["train_seconds"], "wall_seconds": time.perf_counter() - started}


def say(options, message):
    if options.verbose:
        print(message, flush=True)
