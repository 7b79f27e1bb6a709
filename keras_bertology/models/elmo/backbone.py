"""ELMo's bidirectional language model encoder: a character CNN under forward and backward LSTM stacks."""

import keras
from keras import ops

from keras_bertology.layers.character_cnn import ELMO_FILTERS, CharacterCNN
from keras_bertology.layers.dropout import HashedDropout
from keras_bertology.layers.projected_lstm import ProjectedLSTM
from keras_bertology.layers.scalar_mix import ScalarMix
from keras_bertology.models.backbone import Backbone

DIRECTIONS = ("forward", "backward")


def lstm_name(direction, index):
    """The layer name of one direction's LSTM at depth `index` (0-based)."""
    return f"{direction}_lstm_{index}"


@keras.saving.register_keras_serializable(package="keras_bertology")
class ElmoBackbone(Backbone):
    """ELMo (Peters et al., 2018): token vectors from characters, then two LSTM stacks, one per direction.

    Inputs `char_ids` [B, L, max_characters] int32 (bilm-tf's ids plus one,
    0 padding: `models.elmo.characters`) and `padding_mask` [B, L] int32. The
    character CNN (`CharacterCNN`) makes each token's vector x [B, L, P]; the
    forward stack reads x left to right, the backward stack each row's tokens
    right to left, each `num_layers` `ProjectedLSTM`s of `lstm_units` cells
    projected to P, with dropout on every LSTM's input and a residual
    connection around every layer but the first, from that dropped input
    (bilm-tf's). The two
    directions share only the token vectors (and, in pretraining, the
    softmax); neither sees the other's states, so each is a language model.

    Outputs, the representations the TF-Hub module gave (P = projection_dim):
    `token_output` [B, L, P] (its word_emb); `lstm_outputs_<i>` [B, L, 2P],
    layer i's forward and backward states side by side (i = 1..num_layers);
    `forward_output` and `backward_output` [B, L, P], the top layer of each
    direction (the language models' states); and `sequence_output`
    [B, L, 2P], ELMo's task vector: `ScalarMix` of [x; x] and every LSTM
    layer, its weights learned by the task that fine-tunes it (pretraining
    leaves them as they start: the mean).

    `vocab_size` is the word vocabulary the language models predict, kept
    here for the pretrainer's softmax; the encoder itself reads characters
    and never meets an unknown word.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.models.elmo.backbone import ElmoBackbone
        >>> backbone = ElmoBackbone(vocab_size=100, filters=((1, 4), (2, 4)), num_highway=1, projection_dim=8,
        ...                         lstm_units=16, max_characters=10)
        >>> out = backbone({"char_ids": ops.ones((2, 5, 10), "int32"), "padding_mask": ops.ones((2, 5), "int32")})
        >>> tuple(out["sequence_output"].shape), tuple(out["forward_output"].shape)
        ((2, 5, 16), (2, 5, 8))
    """

    embedding_layer_names = ("char_cnn",)

    def __init__(self, vocab_size, num_layers=2, projection_dim=512, lstm_units=4096, filters=ELMO_FILTERS,
                 num_highway=2, num_characters=262, max_characters=50, char_embedding_dim=16, cell_clip=3.0,
                 projection_clip=3.0, dropout=0.1, dtype=None, **kwargs):
        filters = tuple((int(width), int(count)) for width, count in filters)
        inputs = {
            "char_ids": keras.Input((None, max_characters), dtype="int32", name="char_ids"),
            "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
        }
        mask = ops.cast(inputs["padding_mask"], "bool")
        tokens = CharacterCNN(num_characters, char_embedding_dim, filters, num_highway, projection_dim,
                              dtype=dtype, name="char_cnn")(inputs["char_ids"])
        layers = {direction: [] for direction in DIRECTIONS}
        for direction in DIRECTIONS:
            states = tokens
            for index in range(num_layers):
                lstm = ProjectedLSTM(lstm_units, projection_dim, cell_clip, projection_clip,
                                     go_backwards=direction == "backward", dtype=dtype, name=lstm_name(direction, index))
                dropped = HashedDropout(dropout, dtype=dtype, name=f"{direction}_dropout_{index}")(states)
                output = lstm(dropped, mask=mask)
                # The residual adds the LSTM's input as the LSTM read it, after dropout (bilm-tf wraps its
                # ResidualWrapper in the input dropout).
                states = output if index == 0 else keras.layers.Add(dtype=dtype)([output, dropped])
                layers[direction].append(states)
        lstm_outputs = [keras.layers.Concatenate(dtype=dtype, name=f"lstm_outputs_{index + 1}")([forward, backward])
                        for index, (forward, backward) in enumerate(zip(layers["forward"], layers["backward"]))]
        doubled_tokens = keras.layers.Concatenate(dtype=dtype, name="doubled_tokens")([tokens, tokens])
        mixed = ScalarMix(num_layers + 1, dtype=dtype, name="scalar_mix")([doubled_tokens, *lstm_outputs])
        outputs = {"sequence_output": mixed, "token_output": tokens, "forward_output": layers["forward"][-1],
                   "backward_output": layers["backward"][-1]}
        outputs.update({f"lstm_outputs_{index + 1}": output for index, output in enumerate(lstm_outputs)})
        config = dict(vocab_size=vocab_size, num_layers=num_layers, projection_dim=projection_dim,
                      lstm_units=lstm_units, filters=filters, num_highway=num_highway, num_characters=num_characters,
                      max_characters=max_characters, char_embedding_dim=char_embedding_dim, cell_clip=cell_clip,
                      projection_clip=projection_clip, dropout=dropout)
        super().__init__(inputs, outputs, config, dtype=dtype, **kwargs)

    @property
    def hidden_size(self):
        """The width of `sequence_output`, which task heads read."""
        return 2 * self.projection_dim

    @property
    def token_embedding(self):
        raise AttributeError("ELMo reads characters: it has no token table to tie a decoder to")

    @property
    def context_output(self):
        """The top LSTM layer: where a word's sense shows (ELMo's word-sense probes found the top layer best)."""
        return f"lstm_outputs{self.num_layers}"

    def input_limits(self):
        return {"char_ids": self.num_characters, "padding_mask": 2}

    def hidden_states(self, inputs):
        """The depths ELMo's scalar mix reads: the character CNN's vectors (doubled to the LSTMs' width, as
        the mix takes them), then each LSTM layer's two directions."""
        outputs = self(inputs, training=False)
        tokens = outputs["token_output"]
        return [ops.concatenate([tokens, tokens], axis=-1),
                *(outputs[f"lstm_outputs_{index}"] for index in range(1, self.num_layers + 1))]

    def served_outputs(self, outputs, inputs):
        """The outputs of ELMo's TF-Hub module, one position per word of the text (the <S> and </S> that
        packing added are dropped, padding is 0): `elmo` (the scalar mix), `word_emb` (the character CNN's
        vectors), `lstm_outputs<i>` (layer i, both directions), `default` (the mean of `elmo` over the
        words) and `sequence_len` (words per text); also `token_ids` (the words' ids)."""
        words = ops.cast(inputs["padding_mask"][:, 2:], "float32")[:, :, None]  # position p + 1 holds a word
        served = {"elmo": outputs["sequence_output"], "word_emb": outputs["token_output"],
                  **{f"lstm_outputs{index}": outputs[f"lstm_outputs_{index}"]
                     for index in range(1, self.num_layers + 1)}}
        served = {name: value[:, 1:-1] * words for name, value in served.items()}
        count = ops.sum(words, axis=1)
        served["default"] = ops.sum(served["elmo"], axis=1) / ops.maximum(count, 1.0)
        served["sequence_len"] = ops.cast(count[:, 0], "int32")
        served["token_ids"] = inputs["token_ids"][:, 1:-1] * ops.cast(words[:, :, 0], "int32")
        return served

    def variable_depths(self):
        """Layer-wise learning rates: 0 for the character CNN, i + 1 for both directions' LSTMs at layer i,
        num_layers + 1 for the scalar mix."""
        depths = {}
        for layer in self.layers:
            if layer.name in self.embedding_layer_names:
                depth = 0
            else:
                depth = next((index + 1 for index in range(self.num_layers)
                              for direction in DIRECTIONS if layer.name == lstm_name(direction, index)),
                             self.num_layers + 1)
            depths.update({variable.path: depth for variable in layer.trainable_variables})
        return depths
