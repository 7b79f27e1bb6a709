"""What the peer suite trains: each pretraining model's shapes, its synthetic batches and its FLOPs.

Every system of one measurement (ours, keras-hub, transformers on PyTorch)
trains the same architecture at the same shape on the same arrays: random
token ids (no padding), two segments, `predictions` distinct masked
positions per row with random target ids, and a random sentence-pair label
for the models with one (NSP, SOP). The arrays come from a fixed seed, so
every fresh worker process rebuilds exactly the same batches.
"""

import dataclasses

import numpy as np

BATCHES_IN_MEMORY = 4


@dataclasses.dataclass(frozen=True)
class Shape:
    """One encoder size and batch; `warmup` and `steps` are its timing defaults."""

    num_layers: int
    hidden_size: int
    num_heads: int
    intermediate_size: int
    seq_len: int
    batch_size: int
    warmup: int
    steps: int

    @property
    def predictions(self):
        """BERT's prediction slots: 20 for 128 tokens (15% masked, rounded up as BERT's data does)."""
        return max(1, round(self.seq_len * 0.15625))

    def describe(self):
        return (f"{self.num_layers}L/{self.hidden_size}H/{self.num_heads}A/{self.intermediate_size}F "
                f"seq {self.seq_len} batch {self.batch_size}")


SHAPES = {
    "tiny": Shape(2, 64, 2, 128, 32, 8, warmup=1, steps=3),
    "small": Shape(4, 256, 4, 1024, 128, 16, warmup=3, steps=12),
    "base": Shape(12, 768, 12, 3072, 128, 8, warmup=2, steps=6),
    # The GPU variant (benchmarks/gpu_peers.sh): the shapes of the H100 figures in ../shared/GPU.md.
    "gpu_base128": Shape(12, 768, 12, 3072, 128, 128, warmup=5, steps=30),
    "gpu_base512": Shape(12, 768, 12, 3072, 512, 32, warmup=5, steps=30),
    "gpu_large128": Shape(24, 1024, 16, 4096, 128, 128, warmup=5, steps=20),
}


@dataclasses.dataclass(frozen=True)
class PeerModel:
    """A pretraining model of the library and how its peers express it.

    family / preset: ours, built from the preset's config with the shape's sizes.
    objectives: what one step trains, as the report states it.
    pair_label: the sentence-pair objective's feature ("nsp_labels", "sop_labels") or None.
    hub_task: keras-hub's pretraining task class, None where keras-hub has none.
    hf_model: the transformers model the PyTorch peers train.
    """

    family: str
    preset: str
    objectives: str
    pair_label: str | None
    hub_task: str | None
    hf_model: str


MODELS = {
    "bert": PeerModel("bert", "bert-base", "MLM + NSP", "nsp_labels", "BertMaskedLM", "BertForPreTraining"),
    "roberta": PeerModel("roberta", "roberta-base", "MLM", None, "RobertaMaskedLM", "RobertaForMaskedLM"),
    "albert": PeerModel("albert", "albert-base", "MLM + SOP", "sop_labels", "AlbertMaskedLM",
                        "AlbertForPreTraining"),
    "electra": PeerModel("electra", "electra-base", "generator MLM + 50 x RTD", None, None,
                         "ElectraForPreTraining + ElectraForMaskedLM"),
}


def our_config(model, shape):
    """Our backbone config: the preset's, with the shape's sizes (a factored embedding narrower than the
    hidden size stays; a wider one, ELECTRA-base's at a smaller shape, takes ELECTRA-small's half)."""
    from keras_bertology.models.registry import FAMILIES

    config = dict(FAMILIES[model.family].presets[model.preset]["config"])
    config.update(num_layers=shape.num_layers, hidden_size=shape.hidden_size, num_heads=shape.num_heads,
                  intermediate_size=shape.intermediate_size)
    if config.get("embedding_size", 0) > shape.hidden_size:
        config["embedding_size"] = shape.hidden_size // 2
    return config


def generator_width(model, shape):
    """ELECTRA's generator (hidden, heads) at `shape`, by the preset's fraction; None for other models."""
    from keras_bertology.models.electra.pretrainer import generator_width as width
    from keras_bertology.models.registry import FAMILIES

    fraction = FAMILIES[model.family].presets[model.preset].get("pretrainer", {}).get("generator_fraction")
    return width(shape.hidden_size, fraction) if fraction else None


def synthetic_features(model, shape, vocab_size, seed=1234):
    """The shared batches as one dict of numpy arrays, `BATCHES_IN_MEMORY` batches long."""
    rng = np.random.default_rng(seed)
    rows, length, slots = BATCHES_IN_MEMORY * shape.batch_size, shape.seq_len, shape.predictions
    features = {
        "token_ids": rng.integers(1000, vocab_size, size=(rows, length), dtype=np.int32),
        "segment_ids": np.repeat((np.arange(length) >= length // 2)[None].astype(np.int32), rows, axis=0),
        "padding_mask": np.ones((rows, length), np.int32),
        # Distinct positions, never the first or last token, in increasing order as the maskers give them.
        "mask_positions": np.sort(np.argsort(rng.random((rows, length - 2)), axis=1)[:, :slots] + 1,
                                  axis=1).astype(np.int32),
        "mask_ids": rng.integers(1000, vocab_size, size=(rows, slots), dtype=np.int32),
        "mask_weights": np.ones((rows, slots), np.float32),
    }
    if model.pair_label:
        features[model.pair_label] = rng.integers(0, 2, size=(rows,), dtype=np.int32)
    return features


def _encoder_flops(tokens, seq_len, hidden, intermediate, layers):
    """Forward matmul FLOPs of `layers` Transformer layers over `tokens` tokens in rows of `seq_len`."""
    projections = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 2 * 2 * tokens * seq_len * hidden  # scores and the weighted sum of values
    return layers * (projections + attention)


def train_flops(model, shape):
    """Matmul FLOPs of one training step (3 x the forward: the backward costs two forwards).

    Embedding look-ups, norms, softmaxes and the optimizer are left out, as in
    the usual model-FLOPs utilisation; the masked-LM head counts only the
    predicted positions (every system here computes logits only there).
    """
    config = our_config(model, shape)
    vocab_size, generator = config["vocab_size"], (generator_width(model, shape) or (None,))[0]
    tokens, slots = shape.batch_size * shape.seq_len, shape.batch_size * shape.predictions
    hidden = shape.hidden_size
    width = config.get("embedding_size") or hidden
    forward = _encoder_flops(tokens, shape.seq_len, hidden, shape.intermediate_size, shape.num_layers)
    if width != hidden:
        forward += 2 * tokens * width * hidden  # embedding projection
    if generator:  # ELECTRA: the generator's encoder, its MLM head, the discriminator's token head
        forward += _encoder_flops(tokens, shape.seq_len, generator, 4 * generator, shape.num_layers)
        forward += 2 * tokens * width * generator if width != generator else 0
        forward += 2 * slots * (generator * width + width * vocab_size)
        forward += 2 * tokens * (hidden * hidden + hidden)
    else:
        forward += 2 * slots * (hidden * width + width * vocab_size)
    return 3 * forward
