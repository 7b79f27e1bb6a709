"""XLNet pretraining: permutation language modeling over the query stream, with segment recurrence."""

import keras
from keras import ops

from keras_bertology.layers.heads import decode_tokens
from keras_bertology.layers.segment_memory import SegmentMemory
from keras_bertology.models.pretrainer import Objective, Pretrainer, scored

# Permutation LM: the original ids of the P target slots, padded slots weighted 0.
PLM = Objective("plm", label_key="target_ids", weight_key="target_weights", predicts_tokens=True)

PLM_INPUTS = ("perm_mask", "target_mapping")


@keras.saving.register_keras_serializable(package="keras_bertology")
class TiedOutputBias(keras.layers.Layer):
    """Logits = x E^T + b with E the (tied) token embedding: XLNet's LM head, nothing in between.

    `tie_decoder=False` puts a decoder kernel of its own in place of E (an imported checkpoint
    whose decoder differs from its word embeddings, which transformers computes with). With a
    `loss_chunk_size` and `targets` [B, P] it gives each target's (cross-entropy, arg-max hit) instead,
    that many positions at a time (`layers.heads.decode_tokens`).
    """

    def __init__(self, token_embedding, tie_decoder=True, loss_chunk_size=0, **kwargs):
        super().__init__(**kwargs)
        self.token_embedding = token_embedding
        self.tie_decoder = tie_decoder
        self.loss_chunk_size = loss_chunk_size

    def build(self, hidden_shape, targets_shape=None):
        vocab_size = self.token_embedding.input_dim
        if not self.tie_decoder:
            self.decoder_kernel = self.add_weight(shape=(hidden_shape[-1], vocab_size), name="decoder_kernel")
        self.bias = self.add_weight(shape=(vocab_size,), initializer="zeros", name="bias")
        self.built = True

    def call(self, hidden, targets=None):
        decoder_kernel = None if self.tie_decoder else self.decoder_kernel
        return decode_tokens(hidden, self.token_embedding, decoder_kernel, self.bias, targets, self.loss_chunk_size)

    def compute_output_shape(self, hidden_shape, targets_shape=None):
        return (*hidden_shape[:-1], self.token_embedding.input_dim if targets_shape is None else 2)


class QueryStream(SegmentMemory):
    """The encoder's query stream for the target slots, with Transformer-XL memory when `mem_len` > 0.

    The memory (`SegmentMemory`) is carried across `fit` steps and zeroed for
    the rows whose `stream_start` is 1 (a stream begins again). During
    training each layer's memory becomes the last `mem_len` of [memory; its
    input's first `reuse_len` positions] (default L / 2). Batch row r must
    continue row r's text from one batch to the next.

    (A layer of its own because Keras wants every call of one layer, here
    the backbone's encoder, to return the same outputs.)
    """

    def __init__(self, encoder, mem_len=0, batch_size=None, reuse_len=None, bi_data=False, **kwargs):
        super().__init__(encoder, mem_len, batch_size, **kwargs)
        self.reuse_len = reuse_len
        self.bi_data = bi_data

    def call(self, token_ids, segment_ids, padding_mask, perm_mask, target_mapping, stream_start=None,
             training=None):
        memory = self.read_memory(stream_start)
        outputs = self.encoder(token_ids, segment_ids, padding_mask, perm_mask, target_mapping,
                               memory=memory, bi_data=self.bi_data, training=training)
        if training and self.mem_len:
            reuse = self.reuse_len or ops.shape(token_ids)[1] // 2
            self.write_memory(memory, outputs["layer_inputs"][:, :, :reuse])
        return outputs["query"]

    def compute_output_spec(self, token_ids, segment_ids, padding_mask, perm_mask, target_mapping,
                            stream_start=None, training=None):
        batch, slots = target_mapping.shape[0], target_mapping.shape[1]
        return keras.KerasTensor((batch, slots, self.encoder.hidden_size), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_bertology")
class FillInOrder(keras.layers.Layer):
    """`token_ids` [B, L] and `mask_positions` [B, P] -> (perm_mask [B, L, L], target_mapping [B, P, L])
    of a factorization order that puts every blank (`mask_id`) last: no position sees a blank, so
    the query stream at a blank predicts it from the rest of the text, as in pretraining (the
    blanks are filled independently, and the mask token itself is never read)."""

    def __init__(self, mask_id, **kwargs):
        super().__init__(**kwargs)
        self.mask_id = mask_id

    def call(self, token_ids, mask_positions):
        length = ops.shape(token_ids)[1]
        blanks = ops.cast(ops.equal(ops.cast(token_ids, "int32"), self.mask_id), "float32")
        perm_mask = ops.broadcast_to(ops.expand_dims(blanks, 1), (ops.shape(token_ids)[0], length, length))
        return perm_mask, ops.one_hot(ops.cast(mask_positions, "int32"), length, dtype="float32")

    def get_config(self):
        return dict(super().get_config(), mask_id=self.mask_id)

    def compute_output_spec(self, token_ids, mask_positions):
        batch, length = token_ids.shape
        return (keras.KerasTensor((batch, length, length), dtype="float32"),
                keras.KerasTensor((batch, mask_positions.shape[1], length), dtype="float32"))


@keras.saving.register_keras_serializable(package="keras_bertology")
class XLNetPretrainer(Pretrainer):
    """XLNet backbone + permutation LM head (tied to the word embeddings) on the query stream.

    Inputs: the backbone's inputs, `perm_mask` [B, L, L] (1: may not attend),
    `target_mapping` [B, P, L], and with memory `stream_start` [B]. Output:
    `plm` [B, P, V] logits, trained against `target_ids` weighted by
    `target_weights` (from `models.xlnet.permutation`).

    Args:
        backbone: an `XLNetBackbone`.
        mem_len: memory length (0: no recurrence).
        batch_size: rows per batch (per replica), needed with memory.
        reuse_len: positions of each segment kept as memory (default L / 2).
        bi_data: the second half of each batch holds the backward streams.
        tie_decoder: False gives the head a decoder of its own instead of the word embeddings.
        loss_chunk_size: int; > 0 scores the targets (then an input, `target_ids`) that many slots at a
            time instead of keeping [slots, vocabulary] logits for the gradient, as `BertPretrainer` does.

    Example:
        >>> from keras_bertology.models.xlnet import XLNetBackbone, XLNetPretrainer
        >>> backbone = XLNetBackbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=16,
        ...                          intermediate_size=32)
        >>> XLNetPretrainer(backbone, mem_len=8, batch_size=4).objectives
        ['plm']
    """

    def __init__(self, backbone, mem_len=0, batch_size=None, reuse_len=None, bi_data=False, tie_decoder=True,
                 loss_chunk_size=0, **kwargs):
        inputs = dict(backbone.input)
        inputs["perm_mask"] = keras.Input((None, None), dtype="float32", name="perm_mask")
        inputs["target_mapping"] = keras.Input((None, None), dtype="float32", name="target_mapping")
        if mem_len:
            inputs["stream_start"] = keras.Input((), dtype="int32", name="stream_start")
        query = QueryStream(backbone.encoder, mem_len, batch_size, reuse_len, bi_data, name="query_stream")(
            *(inputs.get(name) for name in ("token_ids", "segment_ids", "padding_mask", *PLM_INPUTS,
                                             "stream_start")))
        head = TiedOutputBias(backbone.token_embedding, tie_decoder, loss_chunk_size, dtype=backbone.dtype_policy,
                              name="plm_head")
        if loss_chunk_size:
            inputs["target_ids"] = keras.Input((None,), dtype="int32", name="target_ids")
            outputs, objective = {"plm": head(query, inputs["target_ids"])}, scored(PLM)
        else:
            outputs, objective = {"plm": head(query)}, PLM
        super().__init__(backbone, inputs, outputs, [objective], **kwargs)
        self.loss_chunk_size = loss_chunk_size
        self.mem_len = mem_len
        self.batch_size = batch_size
        self.reuse_len = reuse_len
        self.bi_data = bi_data
        self.tie_decoder = tie_decoder

    output_kinds = ("fill_in",)  # its permutation LM fills in blanks through the query stream

    def masked_lm_model(self, mask_id=None):
        """backbone inputs + `mask_positions` -> [B, P, V] query-stream logits there, the blanks
        (`mask_id`) last in the order (`FillInOrder`): the export's fill-in signature (plain text:
        no memory, no backward rows). None without a mask id."""
        if mask_id is None:
            return None
        inputs = dict(self.backbone.input)
        inputs["mask_positions"] = keras.Input((None,), dtype="int32", name="mask_positions")
        perm_mask, target_mapping = FillInOrder(mask_id, name="fill_in_order")(inputs["token_ids"], inputs["mask_positions"])
        query = QueryStream(self.backbone.encoder, name="fill_in_stream")(
            inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"], perm_mask, target_mapping)
        return keras.Model(inputs, self.get_layer("plm_head")(query), name="fill_in")

    def get_config(self):
        return {**super().get_config(), "mem_len": self.mem_len, "batch_size": self.batch_size,
                "reuse_len": self.reuse_len, "bi_data": self.bi_data, "tie_decoder": self.tie_decoder,
                **({"loss_chunk_size": self.loss_chunk_size} if self.loss_chunk_size else {})}
