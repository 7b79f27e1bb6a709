"""Every family's pretrainer at a few units wide, and one batch of the peer suite's synthetic features for it:
the steps that test_xla.py compiles and test_remat.py recomputes."""

import inspect

import keras
import numpy as np

from benchmarks.peer_models import MODELS, SHAPES, synthetic_features
from keras_bertology.models.registry import FAMILIES

SHAPE = SHAPES["tiny"]
# Smaller than the tiny presets: compilation time grows with the graph, and these tests are about equality.
SIZES = dict(num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=1500)


def tiny_pretrainer(family, dropout=0.0, options=None, **sizes):
    """(pretrainer of `family` at SIZES with `dropout` everywhere a rate is taken and the family `options`,
    one batch (x, y, weights))."""
    keras.utils.set_random_seed(0)
    preset = next(iter(family.presets))
    # Every class's own arguments: a backbone may take its parent's (GPT's dropout) through **kwargs.
    accepted = {name for cls in family.backbone_cls.__mro__ if "__init__" in vars(cls)
                for name in inspect.signature(cls.__init__).parameters}
    small = dict(SIZES, **({"embedding_size": 16} if "embedding_size" in family.presets[preset]["config"] else {}))
    small = family.sized_config(dict(small, **sizes))
    backbone = family.backbone_cls(**family.backbone_config(
        preset, **small, **{key: dropout for key in ("dropout", "attention_dropout") if key in accepted}))
    # A family with a memory: its update, a variable assigned in the step, runs inside the step too.
    options = dict(options or {})
    if family.data.stream_batches:
        options.update((name, value) for name, value in (("mem_len", 8), ("bi_data", 0)) if name in family.option_values())
    pretrainer = family.build_pretrainer(backbone, options, preset, batch_size=SHAPE.batch_size)
    features = _features(family, backbone.vocab_size)
    if family.data.stream_batches:
        features["stream_start"] = np.zeros(len(features["token_ids"]), np.int32)
    x, y, weights = pretrainer.split_features(features)
    rows = slice(0, SHAPE.batch_size)
    batch = keras.tree.map_structure(lambda a: keras.ops.convert_to_numpy(a)[rows], (x, y, weights))
    return pretrainer, batch


def _features(family, vocab_size):
    """The peer suite's synthetic batches, those of a peer model with the family's pretrainer (Linformer's is
    RoBERTa's); a family with neither (a causal LM, whose data stage needs no vocabulary) gets its own data
    stage's features of random tokens."""
    peers = [model for model in MODELS.values() if FAMILIES[model.family].pretrainer_path == family.pretrainer_path]
    peer = MODELS.get(family.name) or next(iter(peers), None)
    if peer is not None:
        return synthetic_features(peer, SHAPE, vocab_size)
    rows = 4 * SHAPE.batch_size
    token_ids = np.random.default_rng(1234).integers(1000, vocab_size, (rows, SHAPE.seq_len), dtype=np.int32)
    stage = family.build_masker(None, SHAPE.predictions)
    features = stage({"token_ids": token_ids, "padding_mask": np.ones_like(token_ids)})
    return keras.tree.map_structure(np.asarray, features)
