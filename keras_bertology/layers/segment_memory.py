"""Transformer-XL's segment-level recurrence, carried across `fit` steps in a variable.

XLNet's query stream and Transformer-XL's language model both read, at each
layer, the states the layer read on the previous batch: batch row r continues
row r's text, so those states hold the text just before. `SegmentMemory` is
the base of the layers that do so: it owns the memory variable, resets the
rows where a stream starts again and writes the new memory after a training
step, without gradient.
"""

import keras
from keras import ops


class SegmentMemory(keras.layers.Layer):
    """Base of a layer that runs `encoder` (with `num_layers`, `hidden_size`) with a memory.

    The memory is a non-trainable variable [num_layers, batch_size, mem_len, H]
    (float32): saved with checkpoints, so a resumed run goes on with the
    memory it stopped with, and zero at the start. With `mask_empty` a second
    variable counts each row's states held (`filled`, [batch_size]), so that
    the empty part of a memory is hidden (`memory_mask`) rather than read as
    zero states: a stream's first segment then sees no memory at all, as in
    Transformer-XL's PyTorch code (XLNet's TensorFlow code reads the zeros).

    Args:
        encoder: the layer whose per-layer inputs are remembered.
        mem_len: states kept per layer (0: no memory, no variable).
        batch_size: rows per batch (per replica).
        mask_empty: hide the memory slots no segment has filled yet.
    """

    def __init__(self, encoder, mem_len=0, batch_size=None, mask_empty=False, **kwargs):
        super().__init__(**kwargs)
        if mem_len and not batch_size:
            raise ValueError("a memory (mem_len > 0) needs the batch size")
        self.encoder = encoder
        self.mem_len = mem_len
        self.batch_size = batch_size
        self.mask_empty = mask_empty

    def build(self, *shapes, **kwargs):
        if self.mem_len:
            self.memory = self.add_weight(
                shape=(self.encoder.num_layers, self.batch_size, self.mem_len, self.encoder.hidden_size),
                initializer="zeros", trainable=False, name="memory")
            if self.mask_empty:
                self.filled = self.add_weight(shape=(self.batch_size,), initializer="zeros", trainable=False,
                                              name="filled")
        self.built = True

    def _filled(self, stream_start):
        return ops.cast(self.filled, "float32") * (1.0 - ops.cast(stream_start, "float32"))

    def memory_mask(self, stream_start):
        """[B, mem_len] int32, 1 on the slots that hold a state (the last `filled` ones); None without
        `mask_empty`."""
        if not (self.mem_len and self.mask_empty):
            return None
        slots = ops.arange(self.mem_len, dtype="float32")[None, :]
        return ops.cast(slots >= self.mem_len - ops.expand_dims(self._filled(stream_start), 1), "int32")

    def read_memory(self, stream_start):
        """The memory with the rows whose `stream_start` [B] is 1 zeroed (their text begins again);
        None without memory."""
        if not self.mem_len:
            return None
        keep = 1.0 - ops.cast(stream_start, "float32")
        return ops.cast(self.memory, "float32") * keep[None, :, None, None]

    def write_memory(self, memory, states, stream_start=None):
        """Keep the last `mem_len` of [memory; states] per layer ([num_layers, B, T, H] states); with
        `mask_empty`, count them (`stream_start` as given to `read_memory`)."""
        length = ops.shape(states)[2]
        states = ops.concatenate([memory, ops.cast(states, "float32")], axis=2)[:, :, -self.mem_len:]
        self.memory.assign(ops.stop_gradient(states))
        if self.mask_empty:
            self.filled.assign(ops.minimum(self._filled(stream_start) + ops.cast(length, "float32"),
                                           float(self.mem_len)))
