"""ELMo biLM presets: AllenNLP's published sizes (original, medium, small) and a tiny one for quick runs.

Parameter counts cover the encoder (the character table of 262 rows, the
convolutions, highways and projection, and the four LSTMs, forward and
backward at each layer, with their projections) and the scalar mix's 4
weights (3 layer weights and a scale), not the word softmax, whose size is
the vocabulary's: the original's biLM, counted as AllenNLP counts it, is
93,600,864, and 4 more with the mix. `vocab_size` is the softmax's: the
published sizes predicted the One Billion Word Benchmark's 793,471 words
(bilm-tf's `n_tokens_vocab`); pretraining sets it from its own vocabulary.
"""

# bilm-tf's filters, (width, count), 2048 in all: `layers.CharacterCNN`'s default, written here again so that
# listing families does not import Keras.
ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
# What every size shares: bilm-tf's character ids (262 rows, 50 a token), 16-wide character vectors and
# clipping at 3.
_ELMO = dict(num_characters=262, max_characters=50, char_embedding_dim=16, cell_clip=3.0, projection_clip=3.0,
             num_layers=2)
# Fewer and narrower filters for the tiny size: the widths of the original, counts cut to 512 in all.
_TINY_FILTERS = ((1, 16), (2, 16), (3, 32), (4, 64), (5, 128), (6, 128), (7, 128))


def _preset(filters, num_highway, projection_dim, lstm_units, params, description, vocab_size=793_471):
    return {"config": dict(_ELMO, vocab_size=vocab_size, filters=filters, num_highway=num_highway,
                           projection_dim=projection_dim, lstm_units=lstm_units),
            "params": params, "description": description}


ELMO_PRESETS = {
    "elmo-tiny": _preset(_TINY_FILTERS, 1, 128, 512, 3_006_436,
                         "2 layers of 512 cells projected to 128, 512 filters (no published checkpoint; quick runs)",
                         vocab_size=8000),
    "elmo-small": _preset(ELMO_FILTERS, 1, 128, 1024, 13_593_316,
                          "AllenNLP's small ELMo: 2 layers of 1024 cells projected to 128, 1 highway"),
    "elmo-medium": _preset(ELMO_FILTERS, 1, 256, 2048, 28_027_748,
                           "AllenNLP's medium ELMo: 2 layers of 2048 cells projected to 256, 1 highway"),
    "elmo-original": _preset(ELMO_FILTERS, 2, 512, 4096, 93_600_868,
                             "the original ELMo: 2 layers of 4096 cells projected to 512, 2 highways"),
}
