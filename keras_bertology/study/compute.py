"""Equal compute: the FLOPs of a pretraining step of each arm, from one real batch of its own data.

Each arm's tokenizer is made once and kept: the study's shared vocabulary
(trained once on the documents every run reads, less the sentences
pretraining holds out) read as its family reads one, or with `--tokenizers
native` its family's own, trained on those sentences. The run starts from
it, so the vocabulary the FLOPs were counted with is the one it trains with.
One batch of the arm's own instances and masking goes through its
pretrainer's traced step (`pretraining.flops`), stage by stage.
"""

import dataclasses
import json
import shutil

import keras
import numpy as np

from keras_bertology.atomic import atomic_directory, atomic_file
from keras_bertology.data.corpus import BadRecords, read_corpus
from keras_bertology.data.held_out_lines import hold_out_sentences
from keras_bertology.data.pipeline import make_dataset
from keras_bertology.data.recipe import build_instances, build_masker, tokenize_documents, unit_marker
from keras_bertology.tokenizers.saved import load_tokenizer
from keras_bertology.tokenizers.shared_vocabulary import train_shared_vocabulary
from keras_bertology.models.family import RunContext
from keras_bertology.pretraining.flops import pretraining_flops
from keras_bertology.engine.model_batches import model_batches

# Steps of the run the per-step average is taken over (step-share options, the two stages, scale with it).
PROBE_STEPS = 1000
# STUDY/tokenizers/<this>: the shared vocabulary (no arm has this name).
SHARED_VOCABULARY = "shared-vocabulary"


def read_documents(options):
    """The study's corpus, read once as `bertology pretrain` reads it."""
    return read_corpus(options.corpus, options.corpus_format, options.text_field, BadRecords(skip=False),
                       say=print if options.verbose else lambda line: None)


def write_task_text(tasks, out):
    """STUDY/pretraining_text.jsonl: every task's training text without its labels, one document per
    example (a classification pair's two texts, a tagged sentence's words, a span example's context
    once), so that pretraining reads in-domain text and never a dev or test example. A task whose text
    is another's (`TaskData.text_of`: bbc-names tags bbc-news's sentences) adds none when that task is
    there too: the text would be read twice, and as one-sentence documents that give NSP a shortcut.
    Returns the path."""
    documents = []
    names = {task.name for task in tasks}
    for task in tasks:
        if task.text_of in names:
            continue
        for example in task.splits["train"]:
            if task.kind == "classification":
                documents.append(" ".join(filter(None, (example["text"], example.get("text_b")))))
            elif task.kind == "tagging":
                documents.append(" ".join(example["words"]))
            else:
                documents.append(example["context"])
    path = out / "pretraining_text.jsonl"
    with atomic_file(path) as staging:
        staging.write_text("".join(json.dumps({"text": text}) + "\n" for text in dict.fromkeys(documents)),
                           encoding="utf-8")
    return path


def arm_tokenizer(family, documents, pretrain_options, folder, given=None, shared=None):
    """The arm's tokenizer, kept in `folder`: `given` (its run context's, a teacher's), else the `shared`
    vocabulary read as its family reads one (`ModelFamily.tokenizer_over`), else its family's own, trained as
    its run would train it."""
    if (folder / "tokenizer.json").is_file():
        return load_tokenizer(folder)
    tokenizer = given
    if tokenizer is None and shared is not None:
        tokenizer = family.tokenizer_over(shared)
    if tokenizer is None:
        tokenizer = family.train_tokenizer(_kept_sentences(documents, pretrain_options.seed),
                                           pretrain_options.vocab_size)
    with atomic_directory(folder) as staging:
        tokenizer.save(staging)
    return load_tokenizer(folder)


def shared_vocabulary(options, out, documents=None):
    """The study's one vocabulary (`--tokenizers shared`), trained once on the sentences every run reads (its
    `documents`, read now when not given, less those pretraining holds out) and kept in
    STUDY/tokenizers/shared-vocabulary; None with `--tokenizers native`."""
    if options.tokenizers != "shared":
        return None
    folder = out / "tokenizers" / SHARED_VOCABULARY
    if not (folder / "tokenizer.json").is_file():
        sentences = _kept_sentences(read_documents(options) if documents is None else documents, options.seed)
        with atomic_directory(folder) as staging:
            train_shared_vocabulary(sentences, options.vocab_size).save(staging)
    return load_tokenizer(folder)


def _kept_sentences(documents, seed):
    """The sentences of `documents` a run of `seed` trains on: all but those pretraining holds out."""
    kept, _ = hold_out_sentences(documents, np.random.default_rng(seed))
    return [sentence for document in kept for sentence in document]


def probe_step(family, tokenizer, documents, pretrain_options, context=None):
    """Average matmul FLOPs of one training step of the arm over a run of `pretrain_options.steps`
    (its stages), the stages [(share of the steps, FLOPs per step)], and the batch they were counted on
    as NumPy arrays (`(x, y, sample_weight)` of the arm's own instances and masking: what a timing of
    its steps elsewhere trains on, benchmarks/bench_study_gpu.py). A `context` (`ModelFamily.run_context`:
    a teacher) enters the pretrainer as in the run, so its forward passes are counted too."""
    options = dataclasses.replace(pretrain_options, dupe_factor=1)  # one build of the instances is enough
    context = context or RunContext()
    backbone = family.backbone_cls(**options.backbone_config(family, **{
        **context.backbone_overrides, "vocab_size": tokenizer.vocab_size, "dtype": "float32"}))
    pretrainer = family.build_pretrainer(backbone, options.family_options, options.preset, options.batch_size,
                                         context)
    pretrainer.compile()
    instances = build_instances(family, tokenize_documents(documents, tokenizer, unit_marker(family, options, documents)),
                                tokenizer, options)
    dataset = make_dataset(instances, options.batch_size, masker=build_masker(family, tokenizer, options),
                           seed=options.seed, shuffle=False)
    batch = next(iter(model_batches(dataset, pretrainer)))
    total, stages = pretraining_flops(pretrainer, batch, options.steps)
    keras.backend.clear_session()
    batch = keras.tree.map_structure(np.asarray, batch)
    return total / options.steps, [(steps / options.steps, flops) for steps, flops in stages], batch


def seed_run_folder(run_dir, tokenizer_dir):
    """Give a new run folder the arm's tokenizer (the run, started with resume, then trains with it)."""
    target = run_dir / "tokenizer"
    if not target.exists():
        with atomic_directory(target) as staging:
            shutil.copytree(tokenizer_dir, staging, dirs_exist_ok=True)
