"""What the peer suite trains: each pretraining model's shapes, its synthetic batches and its FLOPs.

Every system of one measurement (ours, keras-hub, transformers on PyTorch)
trains the same architecture at the same shape on the same arrays: random
token ids (no padding), two segments, `predictions` distinct masked
positions per row with random target ids, and a random sentence-pair label
for the models with one (NSP, SOP). SpanBERT's rows mask whole spans and
carry their boundaries; XLNet's carry a factorization order (perm_mask) and
its `predictions` targets; GPT's predict every next token; T5's carry
decoder inputs and targets of span corruption's length (114 for 512). The arrays come from a fixed seed, so every fresh
worker process rebuilds exactly the same batches (NumPy only: the GPU
machine has no TensorFlow).
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
    # ModernBERT-base's sizes (22 layers, GeGLU of 1,152) at its full context.
    "gpu_long8192": Shape(22, 768, 12, 1152, 8192, 4, warmup=3, steps=10),
}


@dataclasses.dataclass(frozen=True)
class PeerModel:
    """A pretraining model of the library and how its peers express it.

    family / preset: ours, built from the preset's config with the shape's sizes.
    objectives: what one step trains, as the report states it.
    pair_label: the sentence-pair objective's feature ("nsp_labels", "sop_labels") or None.
    hub_task: keras-hub's pretraining task class, None where keras-hub has none.
    hf_model: the transformers model the PyTorch peers train.
    targets: how the rows choose what to predict: "tokens" (MLM), "spans" (SpanBERT's spans and
        their boundaries), "permutation" (XLNet's factorization order) or "next" (a causal LM: every
        next token).
    options: our family's options for the pretrainer (XLNet: no memory, forward rows only).
    note: what a reader of the report must know about this model's rows, or "".
    torch_peer: the transformers builder when the family's objective options change what it trains.
    teacher: the row (a key of MODELS) of a frozen teacher twice as deep that every step runs forward
        (DistilBERT's), or "".
    config: backbone config values over the preset's, (key, value) pairs every system trains with.
    """

    family: str
    preset: str
    objectives: str
    pair_label: str | None
    hub_task: str | None
    hf_model: str
    targets: str = "tokens"
    options: tuple = ()
    note: str = ""
    torch_peer: str = ""  # its builder in peer_torch.BUILDERS; default the family's
    teacher: str = ""
    config: tuple = ()


MODELS = {
    "bert": PeerModel("bert", "bert-base", "MLM + NSP", "nsp_labels", "BertMaskedLM", "BertForPreTraining"),
    # Attention dropout keeps the probabilities written out (layers/dot_product.attend); without it every
    # system can run a fused kernel, which is what this row measures.
    "bert-no-attention-dropout": PeerModel(
        "bert", "bert-base", "MLM + NSP, attention dropout 0", "nsp_labels", None, "BertForPreTraining",
        config=(("attention_dropout", 0.0),),
        note="BERT without attention dropout: ours through keras.ops.dot_product_attention (cuDNN's flash "
             "attention under JAX on a GPU), transformers' sdpa with dropout 0; hidden dropout 0.1 in both (keras-hub's BERT has one dropout rate "
             "for both, so it has no such row)."),
    # And without hidden dropout either: what the random bits of dropout cost a step in each system.
    "bert-no-dropout": PeerModel(
        "bert", "bert-base", "MLM + NSP, no dropout", "nsp_labels", None, "BertForPreTraining",
        config=(("dropout", 0.0), ("attention_dropout", 0.0)),
        note="BERT without any dropout: no random bits drawn in a step of either system."),
    "roberta": PeerModel("roberta", "roberta-base", "MLM", None, "RobertaMaskedLM", "RobertaForMaskedLM"),
    # transformers' DeBERTa computes no enhanced mask decoder: ours runs without it here, the same work.
    "deberta": PeerModel("deberta", "deberta-base", "MLM (last layer, no EMD)", None, None, "DebertaForMaskedLM",
                         options=(("enhanced_mask_decoder", 0),),
                         note="DeBERTa (v1): disentangled attention (c2p + p2c over 2 x 512 relative rows), the MLM "
                              "head on the last layer in both systems (transformers has no enhanced mask decoder)."),
    "deberta-v3": PeerModel("deberta-v3", "deberta-v3-base", "generator MLM + 10 x RTD", None, None,
                            "DebertaV2ForMaskedLM (half depth) + DebertaV2Model",
                            note="DeBERTa-v3: a generator of half the depth, the discriminator's word table = "
                                 "the generator's (no gradient) + its own delta, the detection head reading "
                                 "LayerNorm(h + h_CLS); log-bucketed relative positions (256 buckets)."),
    "deberta-v3-mlm": PeerModel("deberta-v3", "deberta-v3-base", "MLM", None, "DebertaV3MaskedLM",
                                "DebertaV2ForMaskedLM", options=(("objective", "mlm"),), torch_peer="deberta-v3-mlm",
                                note="DeBERTa-v3 masked LM: the v3 encoder (256 log buckets, shared keys, the "
                                     "normed table) under an MLM head on the last layer in every system."),
    "ernie": PeerModel("ernie", "ernie-base", "MLM + NSP", "nsp_labels", None, "ErnieForPreTraining",
                       note="ERNIE 1.0: BERT's MLM + NSP with ReLU and LayerNorm epsilon 1e-5 (its knowledge masking "
                            "is in the data, not the step)."),
    # Blocks of 16 and one random block: block-sparse above 112 tokens (the small and base shapes), full
    # attention below (the tiny shape) in both systems.
    "bigbird": PeerModel("bigbird", "bigbird-roberta-base", "MLM, block-sparse attention", None, None,
                         "BigBirdForMaskedLM", options=(("block_size", 16), ("random_blocks", 1)),
                         note="BigBird: ITC block-sparse attention (3 window + 2 global + 1 random blocks of 16) at "
                              "128 tokens; keras-hub has no BigBird."),
    "distilbert": PeerModel("distilbert", "distilbert-base", "KL (T=2) to a frozen teacher + MLM + cosine", None, None,
                            "DistilBertForMaskedLM + a frozen BertForPreTraining", teacher="bert",
                            note="DistilBERT: the student at the shape's depth and a frozen BERT twice as deep, run "
                                 "forward in every step; the KL over every real token's vocabulary, the MLM at the "
                                 "masked positions, the cosine of the last hidden states."),
    "albert": PeerModel("albert", "albert-base", "MLM + SOP", "sop_labels", "AlbertMaskedLM",
                        "AlbertForPreTraining"),
    "electra": PeerModel("electra", "electra-base", "generator MLM + 50 x RTD", None, None,
                         "ElectraForPreTraining + ElectraForMaskedLM"),
    "spanbert": PeerModel("spanbert", "spanbert-base", "MLM + SBO (spans)", None, "BertMaskedLM",
                          "BertForMaskedLM + span boundary head", targets="spans"),
    # Memory and backward rows are off in every system: transformers' XLNet has no bi_data in training,
    # and a memory would make one step depend on the last.
    "xlnet": PeerModel("xlnet", "xlnet-base", "two-stream PLM, no memory", None, None, "XLNetLMHeadModel",
                       targets="permutation", options=(("mem_len", 0), ("bi_data", 0)),
                       note="XLNet: both streams, the targets predicted last in a random order, no memory and no "
                            "backward rows in either system, so every step does the same work."),
    "gpt": PeerModel("gpt", "gpt2", "causal LM (every next token)", None, "GPT2CausalLM", "GPT2LMHeadModel",
                     targets="next", note="GPT: every system scores every position against the whole "
                                          "vocabulary (a causal LM's logits), with the head tied to the "
                                          "token table."),
    # ELMo at the shape: hidden -> the LSTMs' projection, FFN -> their cells (the family's training.size_keys),
    # elmo-tiny's 8,000 words and 512 filters; both directions score every word against the whole vocabulary.
    "elmo": PeerModel("elmo", "elmo-tiny", "forward + backward LSTM LMs over characters (full softmax)", None, None,
                      "torch.nn.LSTM(proj_size) stacks + the same character CNN", targets="bidirectional",
                      note="ELMo: the character CNN (50 characters a word), forward and backward stacks of "
                           "projected LSTMs with a residual around every layer but the first, one softmax shared "
                           "by both directions over every position; torch's LSTM cannot clip, ours clips its "
                           "cells and projections (two element-wise ops a step more)."),
    "modernbert": PeerModel("modernbert", "modernbert-base", "MLM", None, None, "ModernBertForMaskedLM",
                            note="ModernBERT: rotary positions, every third layer global and the others in a window "
                                 "of 128 (64 on each side), GeGLU at the shape's width, no biases; transformers "
                                 "on sdpa with its sliding-window mask."),
    "t5": PeerModel("t5", "t5-small", "span corruption (the decoder writes the spans)", None, "T5Seq2SeqLM",
                    "T5ForConditionalGeneration", targets="seq2seq",
                    note="T5: both stacks at the shape's size (v1.0: ReLU, tied head scaled by d_model^-0.5), the "
                         "decoder teacher-forced over targets of span corruption's length for the inputs."),
}

SPAN_LENGTH = 4  # SpanBERT's mean span (3.8 pieces), rounded
SBO_POSITION_WIDTH = 200  # the boundary head's offset embedding, as SpanBertPretrainer's default


def teacher_shape(shape):
    """The shape of a DistilBERT row's teacher: twice as deep."""
    return dataclasses.replace(shape, num_layers=2 * shape.num_layers)


def our_config(model, shape):
    """Our backbone config: the preset's with the model's backbone options, at the shape's sizes (a factored embedding narrower than the
    hidden size stays; a wider one, ELECTRA-base's at a smaller shape, takes ELECTRA-small's half)."""
    from keras_bertology.models.registry import FAMILIES

    family = FAMILIES[model.family]
    config = family.backbone_config(model.preset, dict(model.options), **dict(model.config))
    config.update(family.sized_config(dict(num_layers=shape.num_layers, hidden_size=shape.hidden_size,
                                           num_heads=shape.num_heads, intermediate_size=shape.intermediate_size)))
    if "head_dim" in config:  # T5's d_kv, as wide as the shape's heads
        config["head_dim"] = shape.hidden_size // shape.num_heads
    if config.get("embedding_size", 0) > shape.hidden_size:
        config["embedding_size"] = shape.hidden_size // 2
    return config


def generator_width(model, shape):
    """ELECTRA's generator (hidden, heads) at `shape`, by the preset's fraction; None for other models."""
    from keras_bertology.models.electra.sizing import generator_width as width
    from keras_bertology.models.registry import FAMILIES

    fraction = FAMILIES[model.family].presets[model.preset].get("pretrainer", {}).get("generator_fraction")
    return width(shape.hidden_size, fraction) if fraction else None


def synthetic_features(model, shape, vocab_size, seed=1234):
    """The shared batches as one dict of numpy arrays, `BATCHES_IN_MEMORY` batches long."""
    rng = np.random.default_rng(seed)
    rows, length = BATCHES_IN_MEMORY * shape.batch_size, shape.seq_len
    features = {
        "token_ids": rng.integers(1000, vocab_size, size=(rows, length), dtype=np.int32),
        "segment_ids": np.repeat((np.arange(length) >= length // 2)[None].astype(np.int32), rows, axis=0),
        "padding_mask": np.ones((rows, length), np.int32),
    }
    targets = {"tokens": _token_targets, "spans": _span_targets, "permutation": _permutation_targets,
               "next": _next_targets, "seq2seq": _seq2seq_targets, "bidirectional": _bidirectional_targets}
    features.update(targets[model.targets](rng, features["token_ids"], shape.predictions, vocab_size))
    if model.pair_label:
        features[model.pair_label] = rng.integers(0, 2, size=(rows,), dtype=np.int32)
    return features


def _distinct_positions(rng, rows, choices, count):
    """`count` distinct values of range(choices) per row, in increasing order."""
    return np.sort(np.argsort(rng.random((rows, choices)), axis=1)[:, :count], axis=1).astype(np.int32)


def _token_targets(rng, token_ids, slots, vocab_size):
    """MLM: distinct positions, never the first or last token, in increasing order as the maskers give them."""
    rows, length = token_ids.shape
    return {"mask_positions": _distinct_positions(rng, rows, length - 2, slots) + 1,
            "mask_ids": rng.integers(1000, vocab_size, size=(rows, slots), dtype=np.int32),
            "mask_weights": np.ones((rows, slots), np.float32)}


def _span_targets(rng, token_ids, slots, vocab_size):
    """SpanBERT: spans of `SPAN_LENGTH` pieces apart from each other, their boundaries and offsets."""
    rows, length = token_ids.shape
    spans = -(-slots // SPAN_LENGTH)
    # Blocks of a span and one more piece, so that every span keeps its right boundary unmasked.
    starts = 1 + (SPAN_LENGTH + 1) * _distinct_positions(rng, rows, (length - 2) // (SPAN_LENGTH + 1), spans)
    offsets = np.tile(np.arange(SPAN_LENGTH, dtype=np.int32), spans)[:slots]
    starts = np.repeat(starts, SPAN_LENGTH, axis=1)[:, :slots]
    return {**_token_targets(rng, token_ids, slots, vocab_size), "mask_positions": starts + offsets,
            "span_left": starts - 1, "span_right": starts + SPAN_LENGTH,
            "span_offset": np.broadcast_to(offsets, starts.shape).copy()}


def _permutation_targets(rng, token_ids, slots, vocab_size):
    """XLNet: `slots` targets per row predicted last, in a random order among themselves; every other
    token sees all the non-targets (perm_mask[i, j] = 1: i may not attend to j), as XLNet's sampler."""
    rows, length = token_ids.shape
    positions = _distinct_positions(rng, rows, length, slots)
    rank = np.full((rows, length), -1, np.int32)
    np.put_along_axis(rank, positions, np.argsort(rng.random((rows, slots)), axis=1).astype(np.int32), axis=1)
    is_target = rank >= 0
    perm_mask = (rank[:, :, None] <= rank[:, None, :]) & is_target[:, None, :]
    return {"perm_mask": perm_mask.astype(np.float32),
            "target_mapping": np.eye(length, dtype=np.float32)[positions],
            "target_ids": np.take_along_axis(token_ids, positions, axis=1),
            "target_weights": np.ones((rows, slots), np.float32)}


def _next_targets(rng, token_ids, slots, vocab_size):
    """A causal LM: each position's target is the next token; the last position has none (weight 0)."""
    weights = np.ones(token_ids.shape, np.float32)
    weights[:, -1] = 0.0
    return {"next_token_ids": np.roll(token_ids, -1, axis=1), "next_token_weights": weights}


CHARACTERS = 50  # ELMo's characters a word
CHARACTER_IDS = 262  # its character table


def _bidirectional_targets(rng, token_ids, slots, vocab_size):
    """ELMo: each word spelled in random characters (ids 1..261: no padding), the next and the previous word
    (`token_ids`) as targets, none past either end."""
    rows, length = token_ids.shape
    weights = np.ones((rows, length), np.float32)
    last, first = weights.copy(), weights.copy()
    last[:, -1], first[:, 0] = 0.0, 0.0
    return {"char_ids": rng.integers(1, CHARACTER_IDS, size=(rows, length, CHARACTERS), dtype=np.int32),
            "next_token_ids": np.roll(token_ids, -1, axis=1), "next_token_weights": last,
            "previous_token_ids": np.roll(token_ids, 1, axis=1), "previous_token_weights": first}


def target_length(seq_len):
    """Span corruption's targets for `seq_len` inputs: 114 for 512, in proportion (at least 2)."""
    return max(2, seq_len * 114 // 512)


def _seq2seq_targets(rng, token_ids, slots, vocab_size):
    """An encoder-decoder's teacher-forced targets (random ids, as span corruption's length) and the decoder's
    inputs: the targets shifted right after the start token (0)."""
    targets = rng.integers(1000, vocab_size, size=(len(token_ids), target_length(token_ids.shape[1])),
                           dtype=np.int32)
    return {"target_ids": targets, "target_weights": np.ones(targets.shape, np.float32),
            "decoder_token_ids": np.pad(targets[:, :-1], [(0, 0), (1, 0)]),
            "decoder_padding_mask": np.ones(targets.shape, np.int32)}


def _encoder_flops(tokens, seq_len, hidden, intermediate, layers, position_keys=0):
    """Forward matmul FLOPs of `layers` Transformer layers over `tokens` tokens in rows of `seq_len`;
    `position_keys` relative positions per query add their scores (XLNet: 2 x seq_len)."""
    projections = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 2 * tokens * (2 * seq_len + position_keys) * hidden  # scores, position scores, weighted sum
    return layers * (projections + attention)


def _xlnet_flops(shape, slots):
    """XLNet's content stream over every token, its query stream over the targets (query and output
    projections, feed-forward, attention to the content) and the relative positions' projection
    (once per batch), in every layer."""
    hidden, length, layers = shape.hidden_size, shape.seq_len, shape.num_layers
    content = _encoder_flops(shape.batch_size * length, length, hidden, shape.intermediate_size, layers,
                             position_keys=2 * length)
    query = layers * 2 * slots * (2 * hidden * hidden + 2 * hidden * shape.intermediate_size + 4 * length * hidden)
    return content + query + layers * 2 * (2 * length) * hidden * hidden


def train_flops(model, shape, masked_lm_only=False):
    """Matmul FLOPs of one training step (3 x the forward: the backward costs two forwards).

    Embedding look-ups, norms, softmaxes and the optimizer are left out, as in
    the usual model-FLOPs utilisation; the masked-LM head counts only the
    predicted positions (every system here computes logits only there).
    `masked_lm_only` leaves out SpanBERT's boundary head: the step of
    keras-hub's masked-LM task, which trains MLM alone (a pair head of NSP
    or SOP, [batch, hidden] products, is left out either way).
    """
    config = our_config(model, shape)
    if model.targets == "bidirectional":
        return 3 * _elmo_flops(config, shape)
    vocab_size, generator = config["vocab_size"], (generator_width(model, shape) or (None,))[0]
    tokens, slots = shape.batch_size * shape.seq_len, shape.batch_size * shape.predictions
    hidden = shape.hidden_size
    width = config.get("embedding_size") or hidden
    if model.targets == "permutation":  # XLNet: its LM head is the tied embedding alone
        return 3 * (_xlnet_flops(shape, slots) + 2 * slots * hidden * vocab_size)
    if model.targets == "seq2seq":  # both stacks, cross-attention, the tied head over every target
        decoded = shape.batch_size * target_length(shape.seq_len)
        layers, intermediate = shape.num_layers, shape.intermediate_size
        cross = layers * 2 * (decoded * 2 * hidden * hidden + tokens * 2 * hidden * hidden
                              + decoded * 2 * shape.seq_len * hidden)
        return 3 * (_encoder_flops(tokens, shape.seq_len, hidden, intermediate, layers)
                    + _encoder_flops(decoded, target_length(shape.seq_len), hidden, intermediate, layers)
                    + cross + 2 * decoded * hidden * vocab_size)
    if model.targets == "next":  # a causal LM scores every position with the tied table
        return 3 * (_encoder_flops(tokens, shape.seq_len, hidden, shape.intermediate_size, shape.num_layers)
                    + 2 * tokens * hidden * vocab_size)
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
    # SpanBERT's boundary head: two transforms from [left; right; offset]
    if model.targets == "spans" and not masked_lm_only:
        forward += 2 * slots * ((2 * hidden + SBO_POSITION_WIDTH) * hidden + hidden * width + width * vocab_size)
    return 3 * forward


def _elmo_flops(config, shape):
    """ELMo's forward matmul FLOPs: every filter at every character window of every word, the highways'
    two products and the projection; in each direction and layer the LSTM's input and recurrent products
    and its projection; the shared softmax over every word, twice."""
    words = shape.batch_size * shape.seq_len
    embedding, features = config["char_embedding_dim"], sum(count for _, count in config["filters"])
    width, cells = config["projection_dim"], config["lstm_units"]
    convolutions = sum(2 * (CHARACTERS - size + 1) * size * embedding * count for size, count in config["filters"])
    cnn = convolutions + config["num_highway"] * 2 * 2 * features * features + 2 * features * width
    lstm = 2 * (2 * width * 4 * cells + cells * width)
    return words * (cnn + 2 * config["num_layers"] * lstm + 2 * 2 * width * config["vocab_size"])
