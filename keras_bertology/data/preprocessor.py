"""Raw text -> a backbone's inputs, as a Keras layer for `tf.data` pipelines.

The layer packs text exactly as the family's SavedModel serves it (BERT's
[CLS] A [SEP] B [SEP], XLNet's left-padded A <sep> B <sep> <cls>, ...), so a
model trained on its output sees what the export will feed it. It runs
TensorFlow Text ops: map it over a `tf.data.Dataset` (on any Keras backend)
rather than placing it inside the model. It is not saved with a `.keras`
model (a SavedModel export carries the tokenizer): rebuild it with
`from_preset`.
"""

import keras


class TextPreprocessor(keras.layers.Layer):
    """Strings (one text, or two for pairs) -> {input name: [B, seq_len] int32}.

    Args:
        tokenizer: the vocabulary (`tokenizers.base.Tokenizer`).
        family: the `models.family.ModelFamily` whose text layout to follow.
        seq_len: tokens per row, specials included; longer text is cut.
        input_names: the backbone's input names (`list(backbone.input)`): the keys returned.

    Scalar strings (a dataset before batching) give rows of shape [seq_len].

    Example:
        >>> import tensorflow as tf
        >>> from keras_bertology.data.preprocessor import TextPreprocessor
        >>> from keras_bertology.tokenizers.wordpiece import train_wordpiece
        >>> from keras_bertology.models import BERT
        >>> tokenizer = train_wordpiece(["the cat sat on the mat", "a dog ran"] * 20, 60)
        >>> layer = TextPreprocessor(tokenizer, BERT, 8, ["token_ids", "padding_mask", "segment_ids"])
        >>> batch = next(iter(tf.data.Dataset.from_tensor_slices(["the cat", "a dog ran"]).batch(2).map(layer)))
        >>> batch["padding_mask"].numpy().tolist()
        [[1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]]
    """

    def __init__(self, tokenizer, family, seq_len, input_names, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.tokenizer, self.family, self.seq_len = tokenizer, family, int(seq_len)
        self.input_names = list(input_names)

    @classmethod
    def from_preset(cls, name_or_path, seq_len=None, weights=None):
        """The preprocessing of a run folder of this library, a Hugging Face folder or
        `hf://ORG/NAME[@REVISION]` repository (or with `weights="pretrained"` a preset's published one): its
        tokenizer, its family's layout, its inputs, and its sequence length unless `seq_len` is given."""
        from keras_bertology import preset_loading

        return preset_loading.preprocessor(cls, name_or_path, seq_len, weights)

    def call(self, first, second=None):
        scalar = first.shape.rank == 0
        if scalar:
            first, second = first[None], None if second is None else second[None]
        packed = self.family.pack_text(self.tokenizer, self.seq_len, first, second)
        return {name: packed[name][0] if scalar else packed[name] for name in self.input_names}

    def compute_output_spec(self, first, second=None):
        shape = tuple(first.shape) + (self.seq_len,)
        return {name: keras.KerasTensor(shape, dtype="int32") for name in self.input_names}
