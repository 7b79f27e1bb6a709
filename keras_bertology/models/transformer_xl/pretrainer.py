"""Transformer-XL pretraining: the next token at every position, with the previous segment's memory."""

import keras
import numpy as np
from keras import ops

from keras_bertology.layers.adaptive_softmax import AdaptiveSoftmax
from keras_bertology.layers.segment_memory import SegmentMemory
from keras_bertology.models.causal_lm import CLM
from keras_bertology.models.pretrainer import Pretrainer


class MemoryStream(SegmentMemory):
    """The encoder over [memory; segment]; a training step leaves the last `mem_len` states each layer
    read as the memory of the next (`SegmentMemory`, its empty slots hidden), so batch row r must
    continue row r's text.

    (A layer of its own because Keras wants every call of one layer, here the backbone's encoder, to
    return the same outputs.)
    """

    def call(self, token_ids, padding_mask, stream_start=None, training=None):
        memory = self.read_memory(stream_start)
        outputs = self.encoder(token_ids, padding_mask, memory=memory,
                               memory_mask=self.memory_mask(stream_start), training=training)
        if training and self.mem_len:
            self.write_memory(memory, outputs["layer_inputs"], stream_start)
        return outputs["sequence"]

    def compute_output_spec(self, token_ids, padding_mask, stream_start=None, training=None):
        return keras.KerasTensor((*token_ids.shape, self.encoder.hidden_size), dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="keras_bertology")
class TransformerXLPretrainer(Pretrainer):
    """Transformer-XL backbone + adaptive softmax (tied to the adaptive input), trained on segments
    that continue the previous batch's.

    Inputs: `token_ids`, `padding_mask` [B, L], and with memory `stream_start`
    [B] (1 where a row's text begins: its memory is cleared). Output `{"clm":
    [B, L, V]}` float32 log-probabilities (logits without cutoffs), position t
    scoring the token at t + 1 (`next_token_ids`, which the instances give for
    the last position too: the first token of the next segment).

    Args:
        backbone: a `TransformerXLBackbone`.
        mem_len: states kept per layer from one batch to the next (0: none).
        batch_size: rows per batch (per replica), needed with memory.
        tie_projections: per cluster, whether the softmax reuses the input's projection.

    Example:
        >>> from keras_bertology.models.transformer_xl import TransformerXLBackbone, TransformerXLPretrainer
        >>> backbone = TransformerXLBackbone(vocab_size=100, num_layers=1, num_heads=2, hidden_size=16,
        ...                                  intermediate_size=32, cutoffs=[20])
        >>> TransformerXLPretrainer(backbone, mem_len=8, batch_size=4).objectives
        ['clm']
    """

    def __init__(self, backbone, mem_len=0, batch_size=None, tie_projections=None, **kwargs):
        inputs = dict(backbone.input)
        if mem_len:
            inputs["stream_start"] = keras.Input((), dtype="int32", name="stream_start")
        states = MemoryStream(backbone.encoder, mem_len, batch_size, mask_empty=True, name="memory_stream")(
            inputs["token_ids"], inputs["padding_mask"], inputs.get("stream_start"))
        head = AdaptiveSoftmax(backbone.encoder.embedding, tie_projections, dtype=backbone.dtype_policy,
                               name="clm_head")
        super().__init__(backbone, inputs, {"clm": head(states)}, [CLM], **kwargs)
        self.mem_len = mem_len
        self.batch_size = batch_size
        self.tie_projections = head.tie_projections

    output_kinds = ("continuation", "stream_perplexity")

    def causal_lm_model(self):
        """backbone inputs -> next-token log-probabilities [B, L, V] without memory, for serving."""
        inputs = self.backbone.input
        return keras.Model(inputs, self.get_layer("clm_head")(self.backbone(inputs)["sequence_output"]))

    def stream_perplexity(self, token_ids, segment_length, mem_len=None):
        """Perplexity of one token stream read in consecutive segments, each with the memory of the last
        `mem_len` states (default the training memory; 0: none), as the paper evaluates.

        Returns {"perplexity", "tokens", "segment_length", "mem_len"}; every token but the first is scored.
        """
        mem_len = self.mem_len if mem_len is None else mem_len
        encoder, head = self.backbone.encoder, self.get_layer("clm_head")
        stream = np.asarray(token_ids, np.int32)
        memory, total = None, 0.0
        for begin in range(0, len(stream) - 1, segment_length):
            segment = stream[begin:begin + segment_length + 1]
            inputs = ops.convert_to_tensor(segment[None, :-1])
            outputs = encoder(inputs, memory=memory, training=False)
            log_probs = ops.log_softmax(head(outputs["sequence"]), axis=-1)
            targets = ops.convert_to_tensor(segment[None, 1:, None])
            total -= float(ops.sum(ops.take_along_axis(log_probs, targets, axis=-1)))
            if mem_len:
                states = outputs["layer_inputs"] if memory is None else ops.concatenate(
                    [memory, outputs["layer_inputs"]], axis=2)
                memory = states[:, :, -mem_len:]
        tokens = max(len(stream) - 1, 0)
        return {"perplexity": float(np.exp(total / max(tokens, 1))), "tokens": tokens,
                "segment_length": segment_length, "mem_len": mem_len}

    def get_config(self):
        return {**super().get_config(), "mem_len": self.mem_len, "batch_size": self.batch_size,
                "tie_projections": self.tie_projections}
