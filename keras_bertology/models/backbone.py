"""The backbone base: configuration, dtype policy and the token embedding, once for every family.

A family's backbone builds its functional graph in `__init__` from plain
arguments and hands them to this base as `config`; saving, `.keras` round
trips and the tied-decoder hook then need nothing more from it.
"""

import re

import keras

from keras_bertology.errors import ConfigError
from keras_bertology.layers.hidden_states import recording_blocks

_BLOCK = re.compile(r"encoder_block_(\d+)$")


def encoder_inputs(num_segments):
    """The token, padding and (with segments) segment id inputs, [B, L] int32 each."""
    inputs = {
        "token_ids": keras.Input((None,), dtype="int32", name="token_ids"),
        "padding_mask": keras.Input((None,), dtype="int32", name="padding_mask"),
    }
    if num_segments:
        inputs["segment_ids"] = keras.Input((None,), dtype="int32", name="segment_ids")
    return inputs


def first_token_pooler(sequence_output, hidden_size, initializer_range, dtype):
    """BERT's pooled output: dense + tanh over the first token ([CLS])."""
    return keras.layers.Dense(
        hidden_size,
        activation="tanh",
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        dtype=dtype,
        name="pooler",
    )(sequence_output[:, 0, :])


def check_heads(hidden_size, num_heads):
    if hidden_size % num_heads:
        raise ConfigError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")


def keep_policy(model, dtype):
    """Give the Functional `model` the dtype policy `dtype` (None: leave it). Keras' Functional drops its `dtype`
    argument for the global policy, which heads built on `model.dtype_policy` and its config would then read."""
    if dtype is not None:
        model.dtype_policy = dtype


class Backbone(keras.Model):
    """A functional encoder whose constructor arguments are its configuration.

    Every entry of `config` becomes an attribute and is what `get_config`
    returns (with name, trainable and dtype policy), so `from_config` rebuilds
    the same graph. The token table is the `token_embedding` of the layer
    named "embeddings", for heads that tie their decoder to it.
    """

    # The layers of the embeddings, depth 0 of the layer-wise learning rates (`variable_depths`).
    embedding_layer_names = ("embeddings", "embedding_projection")
    # A served output of one contextual vector per word (ELMo's "elmo"), aligned with the served token_ids: the
    # end-of-run summary shows how a word's vectors differ with its senses. None: no such output.
    context_output = None

    def __init__(self, inputs, outputs, config, dtype=None, **kwargs):
        unknown = sorted(set(kwargs) - {"name", "trainable"})
        if unknown:  # Keras' model would drop them unread: a misspelt size would build another model
            raise ConfigError(f"{type(self).__name__} takes no argument {', '.join(unknown)}; its configuration is "
                              f"{', '.join(config)}")
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)
        keep_policy(self, dtype)
        self._config = dict(config)
        for name, value in self._config.items():
            setattr(self, name, value)

    @property
    def token_embedding(self):
        """The token table, for heads that tie their decoder to it."""
        return self.get_layer("embeddings").token_embedding

    def __call__(self, inputs, *args, **kwargs):
        """Refuse, in one line that names the model to call, inputs that lack some of this graph's: a packed
        text alone (`TextPreprocessor`) fills an encoder-decoder's `text_encoder()`, not its decoder."""
        if isinstance(inputs, dict) and isinstance(self.input, dict):
            missing = [name for name in self.input if name not in inputs]
            if missing:
                hint = "" if self.text_encoder() is self else \
                    f"; encode a text alone with {type(self).__name__}.text_encoder()"
                raise ConfigError(f"{type(self).__name__} also takes {', '.join(missing)}{hint}")
        return super().__call__(inputs, *args, **kwargs)

    def text_encoder(self):
        """The model that encodes a text alone: this backbone, whose inputs a packed text fills; an
        encoder-decoder returns its encoder (see `T5Backbone`)."""
        return self

    def hidden_states(self, inputs):
        """[the states the first layer reads, each layer's output], [B, L, H] each, for packed `inputs`: what
        a probe of each depth reads (Tenney et al. 2019). Collected from the blocks' calls
        (layers/hidden_states.py); a family whose layers are not such blocks (ELMo) gives its own."""
        encoder = self.text_encoder()
        with recording_blocks() as states:  # the inputs it takes only (a packed text may hold segments too)
            encoder({name: inputs[name] for name in encoder.input}, training=False)
        if not states:
            raise ConfigError(f"{type(self).__name__} has no encoder blocks that report their states")
        return states

    def encoder_backbone(self):
        """A backbone of this family that is the text encoder alone, for fine-tuning heads: this one, or
        an encoder-decoder's encoder as a backbone of its own with the same weights (see `T5Backbone`)."""
        return self

    def input_limits(self):
        """{input name: exclusive upper bound} of the id inputs that index a table, which a served model
        checks before looking them up (XLNet only compares its segments)."""
        limits = {"token_ids": self.vocab_size, "padding_mask": 2}
        if getattr(self, "num_segments", None):
            limits["segment_ids"] = self.num_segments
        return limits

    def served_outputs(self, outputs, inputs):
        """What a SavedModel's text endpoints return for these encoder `outputs` of packed `inputs`: both,
        by name. A family whose users know other outputs (ELMo's TF-Hub module) names its own."""
        return dict(outputs, **inputs)

    def variable_depths(self):
        """{trainable variable path: depth} for layer-wise learning rates: 0 for the embeddings (and
        their projection), i + 1 for block `encoder_block_i`, num_layers + 1 for the rest."""
        depths = {}
        for layer in self.layers:
            block = _BLOCK.match(layer.name)
            if layer.name in self.embedding_layer_names:
                depth = 0
            else:
                depth = int(block.group(1)) + 1 if block else self.num_layers + 1
            depths.update({variable.path: depth for variable in layer.trainable_variables})
        return depths

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            **self._config,
        }

    @classmethod
    def from_preset(cls, name_or_path, weights=None, **overrides):
        """A backbone from a preset name (new weights at that size; `overrides` change its config, such
        as vocab_size), a run folder of this library, a Hugging Face folder, or a Hugging Face Hub
        repository `hf://ORG/NAME[@REVISION]` (their weights, downloaded and converted once). With
        `weights="pretrained"` a preset name loads its published weights (`bertology presets` lists
        where). Called on this base class it builds whichever family the source holds.

        Example:
            >>> from keras_bertology.models import Backbone
            >>> backbone = Backbone.from_preset("bert-tiny", vocab_size=100)
            >>> type(backbone).__name__, backbone.num_layers, backbone.hidden_size
            ('BertBackbone', 2, 128)
        """
        from keras_bertology import preset_loading

        return preset_loading.backbone(cls, name_or_path, weights, **overrides)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
