"""What the objective study compares (its arms) and at which sizes (its scales).

Each arm is one pretraining objective as the library trains it: a family,
its preset, and the few options that make the variant (static masking, NSP
in place of SOP, the two-stage ELECTRA). Everything else is the family's own
default, so no objective is tuned more than another. The claims each arm
speaks to come from the seeds (the papers' own comparisons).
"""

import dataclasses
import typing
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Arm:
    """One pretraining objective of the study.

    Attributes:
        name: the row's name in the results.
        model, preset: the family and the preset whose architecture it trains (at the scale's size).
        objective: what it trains, in words.
        masking: --masking when the arm departs from the family's default.
        masking_units: --masking-units when the arm departs from the family's default.
        family_options: the family's own options, (name, value) pairs.
        step_share_options: family options set to a share of the arm's steps, (name, share) pairs
            (the two-stage ELECTRA trains its generator alone for half of them).
        arm_folder_options: family options set to the run folder of another arm of the study, (name,
            arm) pairs (DistilBERT's teacher): that arm is pretrained first, and must be in the study.
        depth_share: the arm's layers as a share of the scale's (a student half as deep as its teacher).
        ffn_share: the arm's feed-forward width as a share of the scale's (a gated feed-forward has three
            projections where a plain one has two: 2/3 as wide, it has as many weights).
    """

    name: str
    model: str
    preset: str
    objective: str
    masking: str | None = None
    masking_units: str | None = None
    family_options: tuple = ()
    step_share_options: tuple = ()
    arm_folder_options: tuple = ()
    depth_share: float = 1.0
    ffn_share: float = 1.0

    def options_for(self, steps, study_dir=None):
        """The family options of a run of `steps` steps in the study folder `study_dir`."""
        options = dict(self.family_options)
        options.update({name: max(1, round(share * steps)) for name, share in self.step_share_options})
        options.update({name: str(arm_run_folder(study_dir, arm)) for name, arm in self.arm_folder_options})
        return options or None

    @property
    def depends_on(self):
        """The arms whose runs this arm's run reads."""
        return tuple(arm for _, arm in self.arm_folder_options)

    def encoder_for(self, encoder):
        """The scale's encoder sizes, at this arm's depth and feed-forward width."""
        return dict(encoder, num_layers=max(1, round(encoder["num_layers"] * self.depth_share)),
                    intermediate_size=max(1, round(encoder["intermediate_size"] * self.ffn_share)))


def arm_run_folder(study_dir, arm_name):
    """STUDY/pretrain/<arm>: the pretraining run of an arm."""
    return Path(study_dir) / "pretrain" / arm_name


ARMS = (
    Arm("bert", "bert", "bert-tiny", "MLM + NSP, static masking (x10)"),
    Arm("roberta", "roberta", "roberta-tiny", "MLM, dynamic masking, FULL-SENTENCES"),
    Arm("roberta-static", "roberta", "roberta-tiny", "MLM, static masking (x10), FULL-SENTENCES",
        masking="static"),
    Arm("spanbert", "spanbert", "spanbert-tiny", "span masking, MLM + SBO"),
    Arm("albert", "albert", "albert-tiny", "MLM + SOP, shared layers, n-gram masking"),
    Arm("albert-nsp", "albert", "albert-tiny", "MLM + NSP, shared layers, n-gram masking",
        family_options=(("sentence_task", "nsp"),)),
    Arm("electra", "electra", "electra-tiny", "generator MLM + 50 x replaced token detection"),
    Arm("electra-two-stage", "electra", "electra-tiny",
        "two-stage: generator MLM alone, then detection with the generator frozen",
        step_share_options=(("two_stage_steps", 0.5),)),
    Arm("xlnet", "xlnet", "xlnet-tiny", "permutation LM, two streams, memory"),
    Arm("gpt", "gpt", "gpt-tiny", "causal LM, left to right (GPT-2's architecture)"),
    Arm("transformer-xl", "transformer-xl", "transformer-xl-tiny",
        "causal LM with segment memory, relative positions, adaptive softmax"),
    Arm("t5", "t5", "t5-tiny", "span corruption, encoder-decoder (its encoder fine-tuned)"),
    Arm("deberta", "deberta", "deberta-tiny", "MLM through the enhanced mask decoder, disentangled attention"),
    Arm("deberta-v3", "deberta-v3", "deberta-v3-tiny",
        "generator MLM + 10 x replaced token detection, gradient-disentangled embeddings, disentangled attention"),
    Arm("deberta-v3-mlm", "deberta-v3", "deberta-v3-tiny", "MLM on DeBERTa-v3's encoder (its paper's baseline)",
        family_options=(("objective", "mlm"),)),
    # Blocks of 8 and one random block: block-sparse above 56 tokens, so at the scales' lengths.
    Arm("bigbird", "bigbird", "bigbird-tiny", "MLM, block-sparse attention (block 8, 1 random block)",
        family_options=(("block_size", 8), ("random_blocks", 1))),
    # k = a quarter of the scales' lengths, the paper's default ratio (k = n / 4).
    Arm("linformer", "linformer", "linformer-tiny", "MLM, low-rank attention (k 32, layerwise sharing)",
        family_options=(("projected_length", 32),)),
    # The student of the study's own BERT run, half as deep; its step's FLOPs count the teacher's forward pass.
    Arm("distilbert", "distilbert", "distilbert-tiny",
        "distilled from the bert arm's run, half as deep: KL + MLM + cosine (FLOPs include the teacher's forward)",
        arm_folder_options=(("teacher", "bert"),), depth_share=0.5),
    Arm("ernie", "ernie", "ernie-tiny", "MLM + NSP, knowledge masking: words, then phrases, then entities"),
    Arm("ernie-words", "ernie", "ernie-tiny", "MLM + NSP, whole-word masking throughout (ERNIE's baseline)",
        masking_units="words"),
    # The scale's hidden size is the LSTMs' projection, its FFN size their cells (the family's `size_keys`).
    Arm("elmo", "elmo", "elmo-tiny", "forward + backward LSTM language models over characters (biLM), scalar mix"),
    # GeGLU two thirds as wide as the scale's FFN: as many feed-forward weights as the other arms'.
    Arm("modernbert", "modernbert", "modernbert-tiny",
        "MLM at 30%, rotary positions, global and sliding-window layers, GeGLU, warmup-stable-decay",
        ffn_share=2 / 3),
)
ARM_NAMES = tuple(arm.name for arm in ARMS)


def arm_named(name):
    """The arm of ARMS called `name`."""
    return next(arm for arm in ARMS if arm.name == name)

# What a claim may name as the one thing its two arms differ in.
FACTORS = ("objective", "masking", "attention", "architecture", "tokenizer")


class Claim(typing.NamedTuple):
    """One of the seeds' claims the study can check: `arm` against `against` by `relation` ("better",
    "same": a wash, "at least": as well as; see study/report.py) on `task` (None: every task), the two
    arms differing in `factor` (one of FACTORS) and, for a verdict, in nothing else the study records
    (study/comparability.py)."""

    text: str
    arm: str
    against: str
    relation: str
    task: str | None
    factor: str


CLAIMS = (
    Claim("ELECTRA learns more per unit of compute than MLM", "electra", "bert", "better", None, "objective"),
    Claim("span masking + SBO beats token masking on extraction (tagging)", "spanbert", "bert", "better",
          "bbc-names", "objective"),
    Claim("dynamic masking is a wash against static", "roberta", "roberta-static", "same", None, "masking"),
    Claim("NSP does not help: MLM alone does as well", "roberta-static", "bert", "at least", None, "objective"),
    Claim("SOP beats NSP", "albert", "albert-nsp", "better", None, "objective"),
    Claim("joint ELECTRA beats its two-stage variant", "electra", "electra-two-stage", "better", None, "objective"),
    Claim("permutation LM does at least as well as MLM", "xlnet", "bert", "at least", None, "objective"),
    Claim("a bidirectional MLM beats a left-to-right LM", "bert", "gpt", "better", None, "objective"),
    Claim("permutation LM beats a left-to-right LM", "xlnet", "gpt", "better", None, "objective"),
    Claim("segment recurrence does at least as well as a plain left-to-right LM", "transformer-xl", "gpt",
          "at least", None, "architecture"),
    Claim("span corruption in an encoder-decoder does at least as well as MLM", "t5", "bert", "at least", None,
          "objective"),
    Claim("disentangled attention with the enhanced mask decoder beats RoBERTa's MLM", "deberta", "roberta", "better",
          None, "attention"),
    Claim("DeBERTa-v3's detection with disentangled sharing beats ELECTRA's", "deberta-v3", "electra", "better", None,
          "architecture"),
    Claim("on DeBERTa-v3's encoder, replaced token detection beats MLM", "deberta-v3", "deberta-v3-mlm", "better",
          None, "objective"),
    Claim("block-sparse attention does as well as full attention", "bigbird", "roberta", "at least", None,
          "attention"),
    Claim("low-rank attention does as well as full attention", "linformer", "roberta", "at least", None, "attention"),
    Claim("phrase and entity masking beats whole-word masking", "ernie", "ernie-words", "better", None, "masking"),
    Claim("a bidirectional Transformer MLM beats ELMo's two LSTM language models", "bert", "elmo", "better", None,
          "architecture"),
    Claim("the modern recipe (ModernBERT's) beats BERT's at equal compute", "modernbert", "bert", "better", None,
          "architecture"),
    Claim("the modern recipe (ModernBERT's) beats RoBERTa's at equal compute", "modernbert", "roberta", "better", None,
          "architecture"),
)


@dataclasses.dataclass(frozen=True)
class Scale:
    """The encoder size, data shape, budget and fine-tuning protocol of one study.

    `reference_steps` of the first arm (BERT) set the compute budget every
    arm gets; `budgets` are the shares of it each arm is pretrained with
    (the score-against-compute curves, fine-tuned with `verdict_labels`
    examples, or `token_verdict_labels` on a token-level task: a tagger learns
    frequent words' tags from its labels alone, so pretraining shows at fewer
    of them; docs/study.md's probes). The reference arm at the full budget,
    and random initialisation, are also fine-tuned with each of
    `label_counts` labeled examples (the learning curves: where pretraining
    pays). Every fine-tuning run follows one
    recipe: a seed draws the labeled examples and starts the head, the same
    for every arm (a paired design), and the last epoch is kept (a dev split
    would hold more labels than the run learns from). Small draws train in
    smaller batches and for more epochs, so that each run takes at least
    `finetune_min_steps`.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    seq_len: int
    batch_size: int
    reference_steps: int
    budgets: tuple
    label_counts: tuple
    verdict_labels: int
    token_verdict_labels: int | None = None  # None: verdict_labels
    seeds: int = 5
    finetune_epochs: int = 3
    finetune_batch_size: int = 32
    finetune_min_steps: int = 60
    finetune_learning_rate: float = 1e-4
    finetune_max_examples: int | None = None  # dev and test kept to their first N (a quick smoke)
    finetune_seq_len: int | None = None  # None: the pretraining length
    finetune_summary: str | None = None  # a classifier's summary position; None: each family's own
    # Linear probes (study/probes.py): the training examples' pool each seed draws from, the examples a
    # seed draws, and the test examples (the same for every encoder and seed).
    probe_examples: tuple = (400, 150, 150)

    def verdict_labels_of(self, kind):
        """The label count verdicts are made at on a task of `kind` (see `finetune.tasks.TASK_KINDS`)."""
        token_level = kind != "classification" and self.token_verdict_labels is not None
        return self.token_verdict_labels if token_level else self.verdict_labels

    @property
    def encoder(self):
        return {"num_layers": self.num_layers, "hidden_size": self.hidden_size, "num_heads": self.num_heads,
                "intermediate_size": self.intermediate_size}

    def finetune_recipe(self, labels):
        """(batch size, epochs) of a run on `labels` examples: batches of a quarter of them at most (at
        least 8), and enough epochs for `finetune_min_steps`."""
        batch = max(1, min(self.finetune_batch_size, max(8, labels // 4), labels))
        steps_per_epoch = -(-labels // batch)
        return batch, max(self.finetune_epochs, -(-self.finetune_min_steps // steps_per_epoch))

    def describe(self):
        return (f"{self.num_layers} layers, hidden {self.hidden_size}, {self.num_heads} heads, FFN "
                f"{self.intermediate_size}; sequences of {self.seq_len}, batches of {self.batch_size}")


SCALES = {
    # CI's smoke: every arm and both tasks, a few steps, a few examples.
    "smoke": Scale(1, 32, 1, 64, 32, 8, reference_steps=12, budgets=(0.5, 1.0), label_counts=(8, 16),
                   verdict_labels=16, seeds=2, finetune_epochs=1, finetune_batch_size=16, finetune_min_steps=1,
                   finetune_max_examples=48, probe_examples=(24, 12, 12)),
    # 2 CPU cores: 600 steps of BERT-Tiny's shape per arm on the tasks' own unlabeled text; fine-tuning on
    # 32 / 128 drawn labels, 64 tokens each, at 1e-3 for at least 120 steps (60 left random initialisation
    # short of what it learns, which passed as pretraining paying), classifying from the mean state;
    # verdicts at 128 labels (32 when tagging: pretraining pays there, +0.023 +- 0.004 in the probes).
    # Five paired seeds: with three, the gate's own difference on bbc-names (+0.021) was within the noise of
    # its standard error in one run of the twenty arms (0.011, against 0.004 in the probes). Measured choices:
    # docs/study.md.
    "tiny": Scale(2, 128, 2, 512, 128, 32, reference_steps=600, budgets=(0.25, 0.5, 1.0),
                  label_counts=(32, 128), verdict_labels=128, token_verdict_labels=32, seeds=5,
                  finetune_epochs=6, finetune_min_steps=120, finetune_learning_rate=1e-3, finetune_seq_len=64,
                  finetune_summary="mean"),
    # One GPU or TPU host: BERT-Small's shape (ELECTRA's small comparison): 1.35e12 FLOPs a BERT step,
    # 2.7e16 an arm; the eleven arms pretrain in about 49 min on one H200 (benchmarks/results/study_small_gpu.md).
    "small": Scale(4, 512, 8, 2048, 128, 128, reference_steps=20_000, budgets=(0.25, 0.5, 1.0),
                   label_counts=(32, 128, 512, 1600), verdict_labels=512),
    # A TPU pod slice: BERT-Base's shape.
    "base": Scale(12, 768, 12, 3072, 512, 256, reference_steps=100_000, budgets=(0.25, 0.5, 1.0),
                  label_counts=(32, 128, 512, 1600), verdict_labels=512, finetune_learning_rate=5e-5),
}
