"""What an end-of-run output kind is: the endpoints it adds to an export, the examples it shows of a finished
run and the summary lines that say them.

A pretrainer declares the kinds it has by name (`Pretrainer.output_kinds`);
the export, the end of a pretraining run and its report go through the
declared kinds (`keras_bertology.outputs.registry`) and name none. The
contexts below are what those three hand a kind.
"""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Serving:
    """What an export offers a kind to build its endpoints from.

    Attributes:
        pretrainer: the run's pretrainer, whose model-side hooks the kind calls.
        tokenizer: the in-graph tokenizer.
        seq_len: the export's sequence length.
        input_names: the names of the text encoder's inputs.
        buckets: the export's length buckets.
        pack: `(strings[, strings]) -> packed inputs`, as `serve` packs them.
        encoder: the compiled text encoder (packed inputs -> outputs).
        compile: `keras model -> its compiled call` (XLA when the export asks for it).
        serve: `serve`'s (function, input signature).
        strings: the input signature of a batch of strings.
    """

    pretrainer: object
    tokenizer: object
    seq_len: int
    input_names: list
    buckets: tuple
    pack: Callable
    encoder: Callable
    compile: Callable
    serve: tuple
    strings: object


@dataclasses.dataclass(frozen=True)
class Endpoints:
    """A kind's share of an export: {signature: (function, input signature)}, the Keras model whose variables
    they read (None: only the encoder's), and whether their text inputs keep a text's end (prompts)."""

    functions: dict
    model: object = None
    keep_text_end: bool = False


@dataclasses.dataclass(frozen=True)
class FinishedRun:
    """What the end of a pretraining run offers a kind to draw its examples from: the trained pretrainer,
    the tokenizer, the sentences held out of training, the run's seed and sequence length, the export
    (None before it is written, or without one) and how often each id occurs in the training instances
    ([vocab] ints, None where unknown): the word-frequency baseline an example is ranked against."""

    pretrainer: object
    tokenizer: object
    held_out: list
    seed: int
    seq_len: int
    export_dir: Path | None = None
    token_counts: object = None

    def assets(self):
        """The export's assets/bertology.json (its signatures, its served outputs), read without loading it."""
        return json.loads((Path(self.export_dir) / "assets" / "bertology.json").read_text())


class OutputKind:
    """One kind of end-of-run output; subclasses set `name` and override what they have.

    `reads_export`: the examples are computed by the exported SavedModel (so
    they also prove the export serves) and wait for it; otherwise by the
    pretrainer, before metrics.json is first written. `every_run`: metrics
    entries every run has, whether or not its model has this kind.
    """

    name = None
    reads_export = True
    every_run = {}

    def endpoints(self, serving):
        """This kind's `Endpoints` for an export (`Serving`); None when it serves nothing there."""
        return None

    def examples(self, run):
        """{metrics.json key: value} of this kind's examples of a `FinishedRun`; {} when it has none."""
        return {}

    def summary_lines(self, metrics):
        """The end-of-run report's lines about this kind's examples in `metrics`; [] when it has none."""
        return []
