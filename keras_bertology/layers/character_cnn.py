"""ELMo's token encoder (bilm-tf's character CNN): a token's vector from its characters alone.

ELMo has no word vocabulary: every token, seen in training or not, is read
from its characters, so the input layer never meets an unknown word.
"""

import keras
from keras import ops

from keras_bertology.layers.activations import get_activation

# bilm-tf's filters: (width, count) per convolution, 2048 in all.
ELMO_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))


def _fan_in_normal():
    """Normal weights with a variance of 1 / fan-in (bilm-tf's `stddev=sqrt(1 / n)`), untruncated."""
    return keras.initializers.VarianceScaling(1.0, mode="fan_in", distribution="untruncated_normal")


@keras.saving.register_keras_serializable(package="keras_bertology")
class CharacterCNN(keras.layers.Layer):
    """Character ids [B, L, max_chars] -> token vectors [B, L, output_dim].

    Each token's characters are embedded, then for every (width, count) in
    `filters` a 'valid' 1-D convolution (with bias) runs over them and its
    maximum over the character positions, passed through the activation, is
    one feature per filter: an n-gram detector that fires anywhere in the
    word. The features are concatenated, pass `num_highway` highway layers
    (`g = sigmoid(x W_g + b_g)`, `x = g * relu(x W_t + b_t) + (1 - g) * x`,
    with `b_g` starting at -2 so that a new layer mostly carries its input),
    and a linear projection (with bias) to `output_dim`.

    Character id 0 is padding; a token whose ids are all 0 is a padding token.
    Its vector is computed like any other (as in bilm-tf); the layer's output
    mask (`compute_mask`, which Keras hands to the next layer) marks it False.
    `max_chars` must be at least the widest filter.

    Args:
        num_characters: int, rows of the character table (262 in ELMo: 256
            bytes, 5 markers, plus 1 so that 0 pads).
        char_embedding_dim: int, width of a character's vector (16).
        filters: sequence of (width, count) pairs (ELMo's: 2048 filters).
        num_highway: int, highway layers after the convolutions (2).
        output_dim: int, width of a token's vector (512).
        activation: str, a name from `layers.activations`, applied after the max.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import CharacterCNN
        >>> cnn = CharacterCNN(num_characters=20, char_embedding_dim=4, filters=((1, 3), (2, 5)),
        ...                    num_highway=1, output_dim=6)
        >>> ids = ops.convert_to_tensor([[[3, 4, 5, 0], [7, 0, 0, 0], [0, 0, 0, 0]]])
        >>> tuple(cnn(ids).shape)
        (1, 3, 6)
        >>> ops.convert_to_numpy(cnn.compute_mask(ids)).tolist()
        [[True, True, False]]
    """

    def __init__(self, num_characters=262, char_embedding_dim=16, filters=ELMO_FILTERS, num_highway=2,
                 output_dim=512, activation="relu", **kwargs):
        super().__init__(**kwargs)
        self.num_characters = num_characters
        self.char_embedding_dim = char_embedding_dim
        self.filters = [(int(width), int(count)) for width, count in filters]
        self.num_highway = num_highway
        self.output_dim = output_dim
        self.activation = activation
        self.supports_masking = True

    @property
    def num_features(self):
        return sum(count for _, count in self.filters)

    def build(self, input_shape):
        max_chars = input_shape[-1]
        widest = max(width for width, _ in self.filters)
        if max_chars is not None and max_chars < widest:
            raise ValueError(f"max_chars={max_chars} is narrower than the widest filter ({widest})")
        # bilm-tf's initialisation throughout: characters uniform in +-1; the filters uniform in +-0.05 under
        # ReLU (Kim et al.'s, bilm-tf's choice for ELMo) or normal with a variance of 1 / fan-in under another
        # activation; the highways and the projection normal with a variance of 1 / fan-in. (Keras' defaults,
        # characters in +-0.05, give every word nearly the same vector.)
        self.char_embedding = keras.layers.Embedding(self.num_characters, self.char_embedding_dim,
                                                     embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
                                                     dtype=self.dtype_policy, name="char_embedding")
        self.char_embedding.build(None)
        self.convolutions = []
        filters_initializer = (keras.initializers.RandomUniform(-0.05, 0.05) if self.activation == "relu"
                               else _fan_in_normal())
        for width, count in self.filters:
            conv = keras.layers.Conv1D(count, width, padding="valid", kernel_initializer=filters_initializer,
                                       dtype=self.dtype_policy, name=f"conv_width_{width}")
            conv.build((None, max_chars, self.char_embedding_dim))
            self.convolutions.append(conv)
        features = self.num_features
        self.highway_transforms, self.highway_gates = [], []
        for index in range(self.num_highway):
            transform = keras.layers.Dense(features, activation="relu", kernel_initializer=_fan_in_normal(),
                                           dtype=self.dtype_policy, name=f"highway_{index}_transform")
            gate = keras.layers.Dense(features, activation="sigmoid", kernel_initializer=_fan_in_normal(),
                                      bias_initializer=keras.initializers.Constant(-2.0),
                                      dtype=self.dtype_policy, name=f"highway_{index}_gate")
            transform.build((None, features))
            gate.build((None, features))
            self.highway_transforms.append(transform)
            self.highway_gates.append(gate)
        self.projection = keras.layers.Dense(self.output_dim, kernel_initializer=_fan_in_normal(),
                                             dtype=self.dtype_policy, name="projection")
        self.projection.build((None, features))
        self.built = True

    def call(self, char_ids):
        char_ids = ops.cast(char_ids, "int32")
        batch, length, max_chars = ops.shape(char_ids)[0], ops.shape(char_ids)[1], char_ids.shape[-1]
        chars = self.char_embedding(ops.reshape(char_ids, (-1, max_chars)))  # [B*L, max_chars, E]
        activation = get_activation(self.activation)
        x = ops.concatenate([activation(ops.max(conv(chars), axis=1)) for conv in self.convolutions], axis=-1)
        for transform, gate in zip(self.highway_transforms, self.highway_gates):
            share = gate(x)  # how much of the transform replaces the input
            x = share * transform(x) + (1.0 - share) * x
        return ops.reshape(self.projection(x), (batch, length, self.output_dim))

    def compute_mask(self, char_ids, mask=None):
        return ops.any(ops.not_equal(char_ids, 0), axis=-1)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim)

    def get_config(self):
        return dict(super().get_config(), num_characters=self.num_characters,
                    char_embedding_dim=self.char_embedding_dim, filters=self.filters,
                    num_highway=self.num_highway, output_dim=self.output_dim, activation=self.activation)
