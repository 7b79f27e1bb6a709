"""`bertology`: one command line for every model family.

    bertology pretrain --model FAMILY --preset NAME [--corpus PATH ...] [--steps N]
                       [--batch-size B] [--seq-len L] [--out RUN_DIR] [--export DIR]
    bertology prepare --model FAMILY --corpus PATH|GLOB ... --out DATA_DIR [--shards N]
                      [--runner NAME] [--workers N] [-- BEAM_OPTIONS]
    bertology pretrain --data DATA_DIR --preset NAME [--steps N] ...
    bertology finetune --task NAME|DATA_DIR --from RUN_DIR [--epochs N] [--batch-size B]
                       [--learning-rate LR] [--layer-decay D] [--seq-len L] [--seed S]
                       [--out DIR] [--export DIR]
    bertology study [--scale tiny|small|base|smoke] [--corpus PATH ...] [--arms NAME ...]
                    [--tasks NAME|DATA_DIR ...] [--seeds N] [--workers N] [--tokenizers shared|native]
                    [--out STUDY_DIR]
    bertology export RUN_DIR [--format saved_model|hf] [--out DIR]
    bertology convert --from-hf HF_DIR|ORG/NAME[@REVISION] --out RUN_DIR [--seq-len L]
    bertology presets [FAMILY]

Errors caused by input (bad corpus, flags, checkpoints, output paths) print
one line, "bertology: error: ...", and exit with status 2; a numeric flag
out of its range (flag_ranges.py, shown in `--help`) is refused as it is
parsed. `--help` and `presets` answer without starting TensorFlow.
"""

import argparse
import os
import re
import sys
from pathlib import Path

from keras_bertology import __version__
from keras_bertology import flag_ranges as ranges
from keras_bertology.extras import missing_extra

EXIT_USAGE = 2


# How `--help` states a flag's default: "(default X", "(the default", "; default X". One statement a flag.
DEFAULT_STATEMENT = re.compile(r"(?:\(|; )(?:the )?default\b")


def _stating_default(help, default):
    """`help` with "(default X)" appended when the flag has a value by default and the text does not say it."""
    nothing = default is None or default is False or default == argparse.SUPPRESS or default in ((), [])
    if nothing or DEFAULT_STATEMENT.search(help):  # False: a switch, off unless given
        return help
    shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
    return f"{help} (default {shown})"


def _number(parser, flag, bounds, help, **kwargs):
    """A numeric flag, parsed and checked against its range (`flag_ranges`) at once: a value out of range
    is refused before anything starts. Its default, then its range, end its `--help` text (inside a closing
    parenthesis)."""
    help = _stating_default(help, kwargs.get("default"))
    help = f"{help[:-1]}; {bounds})" if help.endswith(")") else f"{help} ({bounds})"
    parser.add_argument(flag, type=bounds.parse, help=help, **kwargs)


def _state_defaults(parser):
    """Every flag of every command says its default once (those written without `_number`)."""
    for command in parser._subparsers._group_actions[0].choices.values():
        for action in command._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                action.help = _stating_default(action.help, action.default)


def _length_buckets(parser):
    parser.add_argument("--length-buckets", type=ranges.LENGTH_BUCKET.parse_list, default=(), metavar="N,N,...",
                        help="the SavedModel pads each batch of strings to its longest input; with buckets, to the "
                             "smallest bucket that holds it (e.g. 16,32,64,128), so a server compiling per shape "
                             f"sees a few shapes ({ranges.LENGTH_BUCKET}, at most the sequence length)")


def _serving_xla(parser):
    parser.add_argument("--serving-xla", action="store_true",
                        help="the SavedModel runs its model compiled by XLA, once per input shape: faster calls "
                             "(BERT-Mini on 2 CPU cores: 35%% less time per short input), a compilation at each "
                             "new shape; pair it with --length-buckets")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one `bertology: error:` line, like every other refused input. Flags are taken by
    their full names only: an abbreviation (`--seq` for `--seq-len`) would bypass the checks that look for
    a flag given (`_given_flags`, `_select_backend`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"bertology: error: {message} (see `{self.prog} --help`)\n")


def build_parser():
    from keras_bertology.models import FAMILIES
    from keras_bertology.engine.choices import OPTIMIZERS, SCHEDULES, STRATEGIES
    from keras_bertology.pretraining.options import MIN_WINDOWS, PRECISIONS, XLA_CHOICES, PretrainOptions

    defaults = PretrainOptions()
    parser = _Parser(prog="bertology", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"keras-bertology {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)

    pretrain = commands.add_parser("pretrain", help="pretrain a model on a corpus and export it")
    _add_data_flags(pretrain, defaults, FAMILIES)
    pretrain.add_argument("--data", metavar="DATA_DIR",
                          help="train from the shards of `bertology prepare` instead of reading --corpus; "
                               "the data options (--model, --seq-len, --masking, ...) come from its manifest")
    _number(pretrain, "--steps", ranges.STEPS, "optimizer updates", default=defaults.steps)
    _number(pretrain, "--batch-size", ranges.BATCH_SIZE, "the global batch", default=defaults.batch_size)
    pretrain.add_argument("--out", metavar="RUN_DIR", help="run folder (default: runs/<run name>)")
    pretrain.add_argument("--export", metavar="DIR", help="SavedModel folder (default: savedmodels/<run name>)")
    pretrain.add_argument("--no-export", action="store_true",
                          help="write the run folder only, no SavedModel nor fill-in examples "
                               "(`bertology export RUN_DIR` exports it later)")
    _length_buckets(pretrain)
    _serving_xla(pretrain)
    _number(pretrain, "--learning-rate", ranges.LEARNING_RATE,
            "peak learning rate (default: the family's, 1e-3; 3e-4 for ELECTRA)", default=defaults.learning_rate)
    _number(pretrain, "--layer-decay", ranges.LAYER_DECAY,
            "layer-wise learning-rate decay: block i of N learns at decay^(N+1-i) of the rate, the embeddings "
            "at decay^(N+2) (ELECTRA uses 0.8; default 1: off)", default=defaults.layer_decay)
    pretrain.add_argument("--init-from", metavar="RUN_DIR",
                          help="start from the weights and vocabulary of a finished run of the same family, with "
                               "this run's sequence length, data, schedule and shape-keeping family options (a "
                               "second phase, such as ModernBERT's context extension); the optimizer starts afresh")
    pretrain.add_argument("--optimizer", choices=OPTIMIZERS,
                          help="Keras's adamw (the default), lamb (ALBERT's default), lion or adafactor, each with "
                               "the layer-wise decay, no weight decay on norms and biases, and global-norm clipping "
                               "at 1; without --learning-rate another than the family's own takes the family's rate "
                               "scaled for it (lamb, adafactor: x10; lion: /3)")
    _number(pretrain, "--accumulate", ranges.ACCUMULATE,
            "micro-batches per update: each step holds --batch-size / N sequences and the optimizer applies their "
            "averaged gradient every N steps (--batch-size and --steps count updates)", default=defaults.accumulate,
            metavar="N")
    pretrain.add_argument("--schedule", choices=SCHEDULES,
                          help="learning-rate schedule after the warmup: linear (decays to 0 over the run; "
                               "the default), polynomial (decays to 0 as (1 - progress)^--decay-power), cosine "
                               "(half a cosine to 0), or wsd (warmup-stable-decay: the peak, then 1 - sqrt decay "
                               "over the last --decay-share of the steps; ModernBERT's default)")
    _number(pretrain, "--warmup-steps", ranges.WARMUP_STEPS,
            "updates the rate rises over, from 0 to its peak (default: 10%% of --steps)",
            default=defaults.warmup_steps)
    _number(pretrain, "--decay-share", ranges.DECAY_SHARE, "the share of the steps a wsd schedule decays over",
            default=defaults.decay_share)
    _number(pretrain, "--decay-power", ranges.DECAY_POWER, "the power of a polynomial schedule's decay",
            default=defaults.decay_power)
    _number(pretrain, "--eval-every", ranges.EVAL_EVERY,
            "score every objective on held-out instances (built from documents kept out of training, masked "
            "the same way each time) every K updates and at the end; metrics.json's `eval`, TensorBoard and "
            "the loss plot show them", default=defaults.eval_every, metavar="K")
    _number(pretrain, "--log-every", ranges.LOG_EVERY,
            f"at most this many steps per logged window (fewer when needed for {MIN_WINDOWS} windows); --steps "
            "is rounded up to whole windows", default=defaults.log_every)
    pretrain.add_argument("--precision", choices=PRECISIONS, default=defaults.precision,
                          help="float32, or mixed_bfloat16 (bfloat16 compute, float32 weights); auto: "
                               "mixed_bfloat16 on a TPU, a GPU of compute capability 8.0 or more or a CPU with "
                               "bfloat16 arithmetic (AMX, AVX512-BF16), else float32 (default: "
                               "BERTOLOGY_PRECISION, else auto)")
    pretrain.add_argument("--xla", choices=XLA_CHOICES, default=defaults.xla,
                          help="XLA-compiled train steps (auto: on when training on one device with TensorFlow; "
                               "JAX compiles every step; default: BERTOLOGY_XLA, else auto)")
    pretrain.add_argument("--remat", action="store_true",
                          help="recompute each block's activations in the backward pass instead of keeping them: "
                               "less memory (longer sequences, larger batches) for about a third more compute")
    _number(pretrain, "--attention-dropout", ranges.ATTENTION_DROPOUT,
            "dropout on the attention probabilities while training, in place of the preset's (0.1 for BERT's); at "
            "0 a GPU runs every attention through cuDNN's fused flash attention (--backend jax, mixed_bfloat16), "
            "which takes no dropout (default: the preset's)", default=None)
    pretrain.add_argument("--backend", choices=BACKENDS, default=os.environ.get("KERAS_BACKEND", "tensorflow"),
                          help="Keras backend the model trains on (default: KERAS_BACKEND, else tensorflow); the "
                               "input pipelines run TensorFlow either way, and a JAX run is exported by TensorFlow")
    pretrain.add_argument("--strategy", choices=STRATEGIES, default=defaults.strategy,
                          help="default (the default): one device; mirrored: every local device; multiworker: "
                               "every device of several processes (TF_CONFIG on TensorFlow, KERAS_DISTRIBUTION_* on "
                               "JAX); tpu: a TPU's cores; auto: the widest of these. --batch-size is the global batch")
    _number(pretrain, "--model-parallel", ranges.MODEL_PARALLEL,
            "--backend jax: split each weight over N devices of a (batch, model) mesh, as the family lays its "
            "attention, feed-forward and embedding kernels out; the devices left share the batch",
            default=defaults.model_parallel, metavar="N")
    pretrain.add_argument("--resume", action="store_true",
                          help="continue the run in --out from its newest checkpoint")

    _add_prepare(commands, FAMILIES)
    _add_finetune(commands)
    _add_study(commands)
    _add_probe(commands)

    export = commands.add_parser("export", help="export a run folder to a SavedModel, a Hugging Face model or ONNX")
    export.add_argument("run_dir", metavar="RUN_DIR",
                        help="a run folder written by `bertology pretrain` or `bertology convert` (with --format "
                             "onnx also a `bertology finetune` output folder)")
    export.add_argument("--format", choices=EXPORT_FORMATS, default=EXPORT_FORMATS[0],
                        help="saved_model: a TensorFlow SavedModel serving raw strings; hf: a transformers model "
                             "folder (config.json, model.safetensors, tokenizer files); onnx: the encoder on token "
                             "ids for ONNX Runtime (model.onnx, onnx.json; the onnx extra), and on raw strings "
                             "where ONNX Runtime Extensions tokenize as the run does (model.text.onnx; of text pairs "
                             "too, model.text_pairs.onnx, where the family reads segments)")
    export.add_argument("--out", metavar="DIR",
                        help="default: savedmodels/<run folder name>, or hf/ or onnx/<run folder name> with "
                             "--format hf or onnx")
    export.add_argument("--quantize", choices=("int8",),
                        help="with --format onnx: also model.int8.onnx, its matrix weights in int8 (ONNX Runtime's "
                             "dynamic quantization; docs/serving.md gives the accuracy it costs)")
    _length_buckets(export)
    _serving_xla(export)

    convert = commands.add_parser("convert", help="import a Hugging Face checkpoint into a run folder")
    convert.add_argument("--from-hf", required=True, metavar="HF_DIR|ORG/NAME[@REV]",
                         help="a folder with config.json and model.safetensors (tokenizer files optional), or a "
                              "Hugging Face Hub repository (hf://ORG/NAME[@REVISION]; the hf:// may be left out "
                              "when no such folder exists), fetched into huggingface_hub's cache and converted "
                              "once")
    convert.add_argument("--out", required=True, metavar="RUN_DIR",
                         help="the run folder to write, which `export`, `finetune --from` and `pretrain "
                              "--init-from` then take")
    _number(convert, "--seq-len", ranges.SEQ_LEN,
            "sequence length the exported model packs inputs to (default: 128, or the checkpoint's positions "
            "when fewer)")

    presets = commands.add_parser("presets", help="list every preset with its parameter count")
    presets.add_argument("family", nargs="?", choices=sorted(FAMILIES), metavar="FAMILY",
                         help=f"only this family's presets: {', '.join(sorted(FAMILIES))}")
    _state_defaults(parser)
    return parser


def _add_finetune(commands):
    from keras_bertology.finetune.options import FINETUNE_STRATEGIES, HEADS, SUMMARY_POSITIONS, FinetuneOptions

    defaults = FinetuneOptions()
    builtin = "bbc-news (5-class news topics), bbc-names (proper nouns of BBC News), wnut16 (Twitter NER)"
    finetune = commands.add_parser("finetune", help="fine-tune a pretrained or converted encoder on a task")
    finetune.add_argument("--task", required=True, metavar="NAME|DATA_DIR",
                          help=f"built-in: {builtin}; or a folder with train and test files (dev optional) "
                               "as .tsv or .jsonl (text[, text_b], label; or question, context, answers; or, "
                               "seq2seq for an encoder-decoder, input and target) or .conll / .txt "
                               "(token<TAB>BIO tag)")
    finetune.add_argument("--from", dest="from_dir", required=True, metavar="RUN_DIR",
                          help="run folder written by `bertology pretrain` or `bertology convert`, or a Hugging "
                               "Face Hub repository hf://ORG/NAME[@REVISION] (converted once into its cache)")
    _number(finetune, "--epochs", ranges.EPOCHS, "passes over the training examples", default=defaults.epochs)
    _number(finetune, "--batch-size", ranges.BATCH_SIZE, "the global batch", default=defaults.batch_size)
    _number(finetune, "--learning-rate", ranges.LEARNING_RATE,
            "peak rate of AdamW, reached after --warmup of the steps, then decayed linearly to 0 (default: the "
            "family's, 5e-5; 1e-3 for ELMo)", default=defaults.learning_rate)
    _number(finetune, "--warmup", ranges.WARMUP, "share of steps warming up", default=defaults.warmup)
    _number(finetune, "--layer-decay", ranges.LAYER_DECAY,
            "layer-wise learning-rate decay of the encoder (1: off; ELECTRA uses 0.8); the task head learns at "
            "the full rate", default=defaults.layer_decay)
    _number(finetune, "--seq-len", ranges.SEQ_LEN, "tokens per example (default: the run's)")
    _number(finetune, "--seed", ranges.SEED, "seeds the weights drawn, the shuffling and --train-examples",
            default=defaults.seed)
    finetune.add_argument("--strategy", choices=FINETUNE_STRATEGIES, default=defaults.strategy,
                          help="default (the default): one device; mirrored: every local device; tpu: a TPU's "
                               "cores; auto: the widest of these. --batch-size is the global batch")
    _number(finetune, "--max-examples", ranges.MAX_EXAMPLES, "keep the first N examples of each split (quick trials)",
            metavar="N")
    _number(finetune, "--train-examples", ranges.MAX_EXAMPLES,
            "learn from N training examples drawn by --seed (classification: every class first, then in "
            "proportion; the same N examples for every model with the same seed); dev and test untouched",
            metavar="N")
    finetune.add_argument("--last-epoch", action="store_true",
                          help="keep the last epoch's weights, dev scored once at the end, instead of the best dev "
                               "epoch (quicker; few-label fine-tuning has no dev set larger than its training set)")
    finetune.add_argument("--random-init", action="store_true",
                          help="re-initialise the encoder's weights (a baseline for what pretraining gives)")
    finetune.add_argument("--summary", choices=SUMMARY_POSITIONS,
                          help="where a classifier sums up the text: the first token (BERT's pooler where it has "
                               "one), the last, the last text token, or the mean of all (default: the family's)")
    finetune.add_argument("--head", choices=HEADS, default="auto",
                          help="what learns the task: a head on the encoder, or (an encoder-decoder's) the decoder "
                               "writing each answer, text-to-text (default auto: text-to-text for an "
                               "encoder-decoder's classification and seq2seq tasks, else the encoder)")
    finetune.add_argument("--out", metavar="DIR", help="results folder (default: runs/finetune-<task>-<time>)")
    finetune.add_argument("--export", metavar="DIR", help="SavedModel folder (default: savedmodels/<out name>)")
    finetune.add_argument("--no-export", action="store_true",
                          help="write the results folder only, no SavedModel")
    finetune.add_argument("--remat", action="store_true",
                          help="recompute each block's activations in the backward pass instead of keeping them: "
                               "less memory for long sequences, about a third more compute")
    finetune.add_argument("--results-only", action="store_true",
                          help="write the scores, the report and the curve only: no model.keras, no SavedModel")
    _length_buckets(finetune)
    _serving_xla(finetune)


def _add_probe(commands):
    from keras_bertology.probe_encoder import ProbeOptions

    defaults = ProbeOptions()
    probe = commands.add_parser("probe", help="linear probes of an encoder's every layer against its random control")
    probe.add_argument("--from", dest="from_dir", required=True, metavar="RUN_DIR",
                       help="run folder written by `bertology pretrain` or `bertology convert`")
    probe.add_argument("--task", required=True, metavar="NAME|DATA_DIR",
                       help="as `finetune --task` takes it, of tagged words (bbc-names, wnut16, a .conll folder) or "
                            "one labelled text per example (bbc-news, a .tsv or .jsonl folder)")
    _number(probe, "--seeds", ranges.PROBE_SEEDS,
            "seeds: each draws the probe's training examples and the control's weights", default=defaults.seeds)
    _number(probe, "--pool", ranges.MAX_EXAMPLES, "the first N training examples the seeds draw from",
            default=defaults.pool, metavar="N")
    _number(probe, "--train-examples", ranges.MAX_EXAMPLES, "training examples each seed draws from the pool",
            default=defaults.train_examples, metavar="N")
    _number(probe, "--test-examples", ranges.MAX_EXAMPLES, "the first N test examples, the same for every seed",
            default=defaults.test_examples, metavar="N")
    _number(probe, "--seq-len", ranges.SEQ_LEN, "tokens per example (default: the run's)")
    probe.add_argument("--out", metavar="DIR", help="results folder (default: runs/probe-<task>-<time>)")


def _add_study(commands):
    from keras_bertology.data.corpus import CORPUS_FORMATS
    from keras_bertology.study.arms import ARM_NAMES, SCALES
    from keras_bertology.study.options import BACKENDS as STUDY_BACKENDS
    from keras_bertology.study.options import BATCH_ARM
    from keras_bertology.study.options import TOKENIZERS as STUDY_TOKENIZERS
    from keras_bertology.study.options import StudyOptions

    defaults = StudyOptions()
    study = commands.add_parser(
        "study", help="pretrain every objective at equal compute, fine-tune each, compare (resumable)")
    study.add_argument("--out", default=defaults.out, metavar="STUDY_DIR",
                       help="the study folder; run the same command again to resume an interrupted study")
    study.add_argument("--scale", choices=list(SCALES), default=defaults.scale,
                       help="tiny: 2 CPU cores, about an hour; small: a GPU; base: a TPU slice; smoke: a check")
    study.add_argument("--corpus", nargs="+", metavar="PATH",
                       help="as for pretrain (default: the tasks' own training text, without labels)")
    study.add_argument("--corpus-format", choices=CORPUS_FORMATS, default=defaults.corpus_format,
                       help="as for pretrain")
    study.add_argument("--text-field", default=defaults.text_field, help="as for pretrain")
    study.add_argument("--arms", nargs="+", choices=ARM_NAMES, metavar="ARM",
                       help=f"the objectives to compare, of {', '.join(ARM_NAMES)}; the first sets the compute "
                            f"budget; with --batch-sizes the one arm studied (default: all; {BATCH_ARM} with "
                            "--batch-sizes)")
    study.add_argument("--tasks", nargs="+", default=list(defaults.tasks), metavar="NAME|DATA_DIR",
                       help="fine-tuning tasks, as `finetune --task` takes them")
    _number(study, "--seeds", ranges.STUDY_SEEDS,
            "fine-tuning seeds per arm, task and label count, each drawing the same labeled examples for every "
            f"arm (default: the scale's, {SCALES['tiny'].seeds} for tiny)")
    _number(study, "--seed", ranges.SEED, "the pretraining runs' seed", default=defaults.seed)
    _number(study, "--vocab-size", ranges.VOCAB_SIZE, "the pretraining runs' tokenizer vocabulary",
            default=defaults.vocab_size)
    _number(study, "--workers", ranges.WORKERS,
            "runs side by side, each in a process of its own with its share of the CPU cores (2 cores: 2); "
            "1 on a GPU", default=defaults.workers)
    study.add_argument("--backend", choices=STUDY_BACKENDS, default=defaults.backend,
                       help="the Keras backend of the pretraining runs (jax: the GPU fast path), each in a worker "
                            "process; FLOPs and fine-tuning are counted and run on tensorflow")
    study.add_argument("--batch-sizes", type=ranges.BATCH_SIZE.parse_list, metavar="N,N,...",
                       help="the batch-size axis in place of the objectives: these effective batches (multiples of "
                            "the scale's, accumulated; each " + str(ranges.BATCH_SIZE) + ") at equal samples seen, "
                            "each at its best peak rate of a grid by held-out perplexity, then fine-tuned (RoBERTa's "
                            "table; e.g. 32,128,512 at tiny)")
    study.add_argument("--tokenizers", choices=list(STUDY_TOKENIZERS), default=defaults.tokenizers,
                       help="shared: one cased SentencePiece vocabulary trained once on the study text, for every arm "
                            "whose family takes one (ELMo keeps its words), so that claims compare what they name; "
                            "native: each family's own vocabulary (claims across two then compare vocabularies too)")
    study.add_argument("--all-tasks", action="store_true",
                       help="fine-tune every arm also on the tasks where pretraining did not beat random "
                            "initialisation (scores without verdicts; by default only the gate's runs go there)")


def _add_data_flags(parser, defaults, families):
    """The flags that decide a run's data, shared by `pretrain` and `prepare`."""
    from keras_bertology.data.corpus import CORPUS_FORMATS
    from keras_bertology.pretraining.options import MASKINGS, PACKINGS

    parser.add_argument("--model", choices=sorted(families), default=defaults.model, metavar="FAMILY",
                        help=f"the model family: {', '.join(sorted(families))}")
    parser.add_argument("--preset", help="see `bertology presets` (default: bert-tiny for bert, else the family's "
                                          "first, its tiny one)")
    parser.add_argument("--corpus", nargs="+", metavar="PATH",
                        help="text files, folders or glob patterns, .gz read as they are "
                             "(default: the bundled Shakespeare plays)")
    parser.add_argument("--corpus-format", choices=CORPUS_FORMATS, default=defaults.corpus_format,
                        help="auto: by name (*.md plays, *.jsonl, else text with blank lines between documents); "
                             "bert: one sentence per line, blank lines between documents; jsonl: --text-field "
                             "of each JSON line")
    parser.add_argument("--text-field", default=defaults.text_field, help="the text of a JSON Lines record")
    parser.add_argument("--skip-bad-records", action="store_true",
                        help="skip (and count) lines that are not UTF-8 or not valid JSON, instead of stopping")
    _number(parser, "--seq-len", ranges.SEQ_LEN, "tokens per sequence", default=defaults.seq_len)
    _number(parser, "--vocab-size", ranges.VOCAB_SIZE, "the tokenizer's vocabulary, trained on the corpus",
            default=defaults.vocab_size)
    parser.add_argument("--masking", choices=MASKINGS,
                        help="static (BERT default, written once) or dynamic (RoBERTa default)")
    parser.add_argument("--packing", choices=PACKINGS,
                        help="MLM-only families: FULL-SENTENCES (default, may cross documents), DOC-SENTENCES, "
                             "or unpadded (several documents to a row, each attending within itself; RoBERTa, "
                             "ModernBERT)")
    parser.add_argument("--whole-word", action="store_true", help="whole-word masking (--masking-units words)")
    parser.add_argument("--masking-units", metavar="UNITS",
                        help="what is masked whole: tokens, words, phrases or entities, or a schedule over the "
                             "run's equal shares of steps such as words,phrases,entities (ERNIE's; the default of "
                             "--model ernie)")
    parser.add_argument("--phrases", metavar="FILE",
                        help="phrases for --masking-units phrases, one a line (default: the corpus's "
                             "collocations by normalised PMI)")
    parser.add_argument("--gazetteer", metavar="FILE",
                        help="entities for --masking-units entities, one a line (default: runs of capitalised "
                             "names, see docs/masking.md)")
    _number(parser, "--dupe-factor", ranges.DUPE_FACTOR, "masked copies per instance with static masking",
            default=defaults.dupe_factor)
    _number(parser, "--max-predictions", ranges.MAX_PREDICTIONS,
            "masked-LM prediction slots per sequence (default: the family's share of --seq-len: 20 of 128 for "
            "BERT, 19 for ELECTRA)", default=defaults.max_predictions)
    _number(parser, "--seed", ranges.SEED, "seeds the weights, the masking and the order of the data",
            default=defaults.seed)
    _add_family_options(parser, families)


def _add_prepare(commands, families):
    from keras_bertology.prepare.options import PrepareOptions

    defaults = PrepareOptions(out="")
    prepare = commands.add_parser(
        "prepare", help="turn a corpus of any size into sharded TFRecords of a family's instances (Apache Beam)")
    prepare.add_argument("--out", required=True, metavar="DATA_DIR", help="the folder of shards and manifest")
    _add_data_flags(prepare, defaults, families)
    _number(prepare, "--shards", ranges.SHARDS,
            "shard files (default: one per 16 MB of text, at least one per worker)")
    prepare.add_argument("--runner", default=defaults.runner,
                         help="Beam runner: DirectRunner (local processes), FlinkRunner, SparkRunner, "
                              "DataflowRunner, ...; its pipeline options go after `--`")
    _number(prepare, "--workers", ranges.WORKERS, "DirectRunner processes (default: the cores)")
    prepare.add_argument("--tokenizer", metavar="DIR",
                         help="use this saved tokenizer (or run folder's) instead of training one")
    _number(prepare, "--tokenizer-sample-mb", ranges.TOKENIZER_SAMPLE_MB,
            "text the tokenizer is trained on, taken evenly from the corpus files",
            default=defaults.tokenizer_sample_mb)
    _number(prepare, "--batch-size", ranges.BATCH_SIZE,
            "stream families (XLNet): the global batch the streams are laid out for", default=defaults.batch_size)
    _number(prepare, "--replicas", ranges.REPLICAS,
            "stream families (XLNet): the replicas that will share each batch", default=defaults.replicas)
    prepare.add_argument("pipeline_args", nargs="*", metavar="-- BEAM_OPTION",
                         help="further Beam pipeline options, e.g. -- --flink_master=host:8081")


def _add_family_options(parser, families):
    """The families' own flags, one group per set of families that declares them (a flag shared by
    families appears once, under all their names), in the order the families first declare them."""
    owners, options = {}, {}
    for family in families.values():
        for option in family.options:
            owners.setdefault(option.name, []).append(family.name)
            options.setdefault(option.name, option)
    groups = {}
    for name, option in options.items():
        groups.setdefault(tuple(owners[name]), []).append(option)
    for names, group_options in groups.items():
        group = parser.add_argument_group(f"--model {', '.join(names)} only")
        for option in group_options:
            if option.range is None:
                group.add_argument(option.flag, choices=option.choices or None, default=None,
                                   dest=f"family_{option.name}", metavar=None if option.choices else "PATH",
                                   help=_stating_default(option.help, option.default))
            else:
                _number(group, option.flag, option.range, _stating_default(option.help, option.default),
                        default=None, dest=f"family_{option.name}", metavar="N" if option.kind is int else "X")


def _options(args, options_class, **extra):
    """The options object of a command from its parsed flags (family flags gathered in one dict)."""
    fields, family_options = {}, {}
    for name, value in vars(args).items():
        if name.startswith("family_"):
            if value is not None:
                family_options[name.removeprefix("family_")] = value
        elif name not in ("command", "given", "backend"):  # the backend is the process's, set by main
            fields[name] = value
    return options_class(**fields, family_options=family_options or None, **extra)


def _run_pretrain(args):
    from keras_bertology.pretraining.pretrain import PretrainOptions, pretrain

    pretrain(_options(args, PretrainOptions), given=args.given)


def _run_prepare(args):
    from keras_bertology.prepare.options import PrepareOptions
    from keras_bertology.prepare.pipeline import prepare

    prepare(_options(args, PrepareOptions))


def _run_finetune(args):
    from keras_bertology.finetune.run import FinetuneOptions, finetune

    finetune(FinetuneOptions(**{name: value for name, value in vars(args).items() if name not in ("command", "given")}))


def _run_probe(args):
    from keras_bertology.probe_encoder import ProbeOptions, probe_encoder

    probe_encoder(ProbeOptions(**{name: value for name, value in vars(args).items() if name not in ("command", "given")}))


def _run_study(args):
    from keras_bertology.study.run import study

    study(_study_options(args))


def _study_options(args):
    """`StudyOptions` from `bertology study`'s parsed flags (no --arms: the study's default arms)."""
    from keras_bertology.study.options import StudyOptions

    fields = {name: value for name, value in vars(args).items() if name not in ("command", "given")}
    return StudyOptions(**dict(fields, arms=tuple(fields["arms"]) if fields["arms"] else None,
                               tasks=tuple(fields["tasks"])))


def _run_export(args):
    if args.quantize and args.format != "onnx":
        from keras_bertology.errors import ConfigError

        raise ConfigError(f"--quantize applies to --format onnx, not to --format {args.format}")
    if args.format != "saved_model":
        return _run_export_other(args)
    from keras_bertology.export import export_saved_model
    from keras_bertology.output_paths import SAVED_MODEL, claim_output_folder
    from keras_bertology.runs import load_run_model

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else Path("savedmodels") / run_dir.resolve().name
    with claim_output_folder(out, "--out", SAVED_MODEL, replaced=True):
        export_saved_model(load_run_model(run_dir), out, args.length_buckets, args.serving_xla)
    print(f"SavedModel written to {out}")


def _run_export_other(args):
    """`--format hf` or `onnx`: neither serves strings through TensorFlow, so the SavedModel's flags are refused."""
    from keras_bertology.errors import ConfigError
    from keras_bertology.output_paths import HF_MODEL, ONNX_MODEL, claim_output_folder

    for flag, given in (("--length-buckets", args.length_buckets), ("--serving-xla", args.serving_xla)):
        if given:
            raise ConfigError(f"{flag} applies to a SavedModel, not to --format {args.format}")
    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out else Path(args.format) / run_dir.resolve().name
    if args.format == "onnx":
        from keras_bertology.export.onnx import export_onnx
        from keras_bertology.finetune.onnx_export import export_task_onnx
        from keras_bertology.output_paths import FINETUNING, folder_kind
        from keras_bertology.runs import load_run_model

        with claim_output_folder(out, "--out", ONNX_MODEL, replaced=True):
            description = export_task_onnx(run_dir, out, args.quantize) if folder_kind(run_dir) is FINETUNING else \
                export_onnx(load_run_model(run_dir), out, args.quantize)
        print(f"ONNX model written to {out}: inputs {', '.join(spec['name'] for spec in description['inputs'])}; "
              f"outputs {', '.join(description['outputs'])} (opset {description['opset']})")
        for key, what in (("text_model", "string model"), ("text_pairs_model", "string model of text pairs")):
            text = description.get(key)
            if text is None:
                continue
            inputs = text.get("inputs", ())
            print(f"{what} written to {out / text['model']}: input{'s' if len(inputs) > 1 else ''} "
                  f"{', '.join(inputs)}, raw strings (ONNX Runtime Extensions' operators)"
                  if "model" in text else f"no {what}: {text['missing']}; feed {description['model']} ids")
        if "quantized" in description:
            print(f"int8 model written to {out / description['quantized']['model']} (largest difference from the "
                  f"float model on the check inputs: {description['quantized']['max_difference']:.2g})")
        return
    from keras_bertology.convert.hf_export import export_hf

    with claim_output_folder(out, "--out", HF_MODEL, replaced=True):
        exported = export_hf(run_dir, out)
    parts = "".join(f"; {part.architecture} in {out / name}" for name, part in exported.parts.items())
    print(f"{exported.architecture} written to {out}{parts}")
    for note in exported.notes + [note for part in exported.parts.values() for note in part.notes]:
        print(note)


def _run_convert(args):
    from keras_bertology.convert import hub
    from keras_bertology.errors import CheckpointError
    from keras_bertology.output_paths import CONVERTED_RUN, claim_output_folder

    handle = hub.handle_for_source(args.from_hf)
    if handle is None:
        from keras_bertology.convert import convert_hf_checkpoint
        from keras_bertology.runs import save_run_model

        with claim_output_folder(args.out, "--out", CONVERTED_RUN):
            run, report = convert_hf_checkpoint(args.from_hf, seq_len=args.seq_len)
            save_run_model(args.out, run)
        tokenizer = type(run.tokenizer).__name__ if run.tokenizer is not None else None
        family, seq_len, report = run.family, run.seq_len, vars(report)
    else:
        from keras_bertology.runs import copy_run_model

        cached = hub.converted_run(handle)  # before --out is claimed: a failed download leaves nothing there
        report = hub.read_report(cached)
        positions = report["max_positions"]
        if args.seq_len is not None and positions and args.seq_len > positions:
            raise CheckpointError(f"--seq-len {args.seq_len} is above the checkpoint's {positions} positions")
        with claim_output_folder(args.out, "--out", CONVERTED_RUN):
            description = copy_run_model(cached, args.out, seq_len=args.seq_len)
        tokenizer, family = report["tokenizer"], description["family"]
        seq_len = args.seq_len or description["seq_len"]
    _print_conversion(args.out, family, seq_len, tokenizer, report)


def _print_conversion(out, family, seq_len, tokenizer, report):
    heads = ", ".join(report["heads"]) or "none"
    print(f"{report['architecture']} ({family}) written to {out}: encoder + heads: {heads}; "
          f"tokenizer: {tokenizer or 'none that runs in-graph'}; sequence length {seq_len}")
    if report["skipped"]:
        print(f"skipped {len(report['skipped'])} tensors that keras-bertology does not use: "
              + ", ".join(report["skipped"]))
    for note in report["notes"]:
        print(note)


def _run_presets(args):
    """One row a preset (of `args.family` only, when given), its columns as wide as their longest entry."""
    from keras_bertology.models import FAMILIES

    rows = [(family.name, name, f"{preset['params']:,}",
             preset["description"] + (f" [weights: hf://{preset['hf_repo']}]" if "hf_repo" in preset else ""))
            for family in FAMILIES.values() if args.family in (None, family.name)
            for name, preset in family.presets.items()]
    header = ("family", "preset", "parameters", "description")
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(3)]
    for family, preset, params, description in [header, *rows]:
        print(f"{family:<{widths[0]}} {preset:<{widths[1]}} {params:>{widths[2]}}  {description}")


COMMANDS = {"pretrain": _run_pretrain, "prepare": _run_prepare, "finetune": _run_finetune, "study": _run_study,
            "probe": _run_probe, "export": _run_export, "convert": _run_convert, "presets": _run_presets}


BACKENDS = ("tensorflow", "jax")
EXPORT_FORMATS = ("saved_model", "hf", "onnx")


def _select_backend(argv):
    """Keras reads KERAS_BACKEND once, when first imported: `--backend` must set it before anything imports
    Keras. Returns what is wrong with the backend asked for, or None. A study runs on TensorFlow (it
    counts FLOPs in traced graphs and fine-tunes): its --backend is its pretraining workers'."""
    asked = [argv[i + 1] for i, token in enumerate(argv[:-1]) if token == "--backend"]
    asked += [token.split("=", 1)[1] for token in argv if token.startswith("--backend=")]
    if argv[:1] == ["study"]:
        asked = ["tensorflow"]
    if asked and asked[-1] in BACKENDS:  # another value: the parser refuses it
        os.environ["KERAS_BACKEND"] = asked[-1]
    backend = os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if backend not in BACKENDS:
        return f"KERAS_BACKEND={backend}: bertology runs on {' or '.join(BACKENDS)}"
    if backend == "jax" and (problem := missing_extra("jax", "--backend jax")):
        return problem
    keras = sys.modules.get("keras")
    if keras is not None and keras.config.backend() != backend:
        return (f"--backend {backend}: this Python process already runs Keras on {keras.config.backend()}; "
                "run bertology in a fresh process")
    return None


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else list(argv)
    conflict = _select_backend(argv)
    if conflict:
        return _fail(conflict)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.given = _given_flags(parser, args.command, argv)
    from keras_bertology.supervise import needs_supervision, supervise

    if needs_supervision(args.command, os.environ["KERAS_BACKEND"], getattr(args, "strategy", None)):
        return supervise([sys.executable, "-m", "keras_bertology.cli", *argv])
    import signal
    import threading

    from keras_bertology.errors import BertologyError
    from keras_bertology.native_logs import quiet_native_logs

    def on_sigterm(number, frame):
        """A pretraining stops at its next checkpoint; anything else (or a second SIGTERM) at once."""
        callbacks = sys.modules.get("keras_bertology.engine.callbacks")  # imported with Keras, when needed
        if callbacks is None or not callbacks.StopAtCheckpointOnSignal.request(signal.Signals(number)):
            stop = KeyboardInterrupt("stopped by SIGTERM")
            stop.exit_status = 128 + number
            raise stop

    main_thread = threading.current_thread() is threading.main_thread()  # the only one that may set handlers
    previous = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    try:
        with quiet_native_logs():
            COMMANDS[args.command](args)
    except BertologyError as error:
        return _fail(error)
    except OSError as error:  # an output that vanished or filled up while being written
        where = f"{error.filename}: " if error.filename else ""
        return _fail(f"{where}{error.strerror or error}")
    except KeyboardInterrupt as stop:  # Ctrl-C: 130; SIGTERM: 143 (after a pretraining's next checkpoint)
        print(f"bertology: {str(stop) or 'interrupted'}", file=sys.stderr)
        return getattr(stop, "exit_status", 130)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)
    return 0


def _given_flags(parser, command, argv):
    """The option names (dests) typed on the command line, as opposed to defaults."""
    subparser = next(action for action in parser._subparsers._group_actions if action.dest == "command") \
        .choices[command]
    flags = subparser._option_string_actions
    return {flags[token.split("=")[0]].dest for token in argv if token.split("=")[0] in flags}


def _fail(message):
    print(f"bertology: error: {message}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
