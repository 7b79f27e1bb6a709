"""One direction of an LSTM layer with a projection: TensorFlow 1's `LSTMCell(num_units, num_proj,
cell_clip, proj_clip)`, the cell ELMo's biLM is made of.

Keras' LSTM has no projection and no clipping, and torch's `nn.LSTM(proj_size=...)` cannot clip, so the
cell is written here with `keras.ops`, in TensorFlow's weight layout (gate blocks i, j, f, o) so that
bilm-tf's checkpoints load as they are.
"""

import keras
from keras import ops

from keras_bertology.layers.remat import RecomputableBlock


def reverse_within_lengths(x, lengths):
    """Each row's first `lengths[b]` steps of x [B, L, D] in reverse order, its padding left where it is
    (`tf.reverse_sequence`). Its own inverse."""
    steps = ops.expand_dims(ops.arange(ops.shape(x)[1], dtype="int32"), 0)
    lengths = ops.expand_dims(ops.cast(lengths, "int32"), 1)
    index = ops.where(steps < lengths, lengths - 1 - steps, steps)  # [B, L]
    return ops.take_along_axis(x, ops.expand_dims(index, -1), axis=1)


class _StepCell(keras.layers.Layer):
    """`step` as the cell of a `keras.layers.RNN`; its weights are the ProjectedLSTM's."""

    def __init__(self, step, state_size, **kwargs):
        super().__init__(**kwargs)
        self.step = step
        self.state_size = state_size
        self.output_size = state_size[0]

    def call(self, inputs, states):
        return self.step(inputs, states)


def _recurrence(step, lstm):
    """The loop over time for `lstm` (a ProjectedLSTM), made per call: it holds no weights.

    `keras.layers.RNN` rather than `ops.scan`: both run `lax.scan` on JAX, but on TensorFlow Keras' scan keeps
    the carry in a one-element TensorArray, which tf2onnx cannot convert, where the RNN's while loop carries
    the state as loop variables and exports as an ONNX Loop."""
    cell = _StepCell(step, [lstm.projection_dim, lstm.units], dtype=lstm.dtype_policy)
    return keras.layers.RNN(cell, return_sequences=True, return_state=True, dtype=lstm.dtype_policy)


@keras.saving.register_keras_serializable(package="keras_bertology")
class ProjectedLSTM(RecomputableBlock, keras.layers.Layer):
    """Sequences [B, L, D] -> projected hidden states [B, L, projection_dim], one direction.

    A step, with m the projected output and c the cell:

        z = [x_t; m_{t-1}] @ kernel + bias;  i, j, f, o = split(z, 4)
        c = sigmoid(f + forget_bias) * c_{t-1} + sigmoid(i) * tanh(j), clipped to +-cell_clip
        m = (sigmoid(o) * tanh(c)) @ projection_kernel, clipped to +-projection_clip

    The projection keeps the recurrent width small (ELMo: 4096 cells, 512
    outputs) and the clips keep a long-running state bounded. The forget bias
    is added at run time, not stored, as TensorFlow 1 does.

    Padding sits at the end of each row (`mask` False). A padded step outputs
    zeros and leaves the state as it was, so the final state is the state
    after the row's last token. With `go_backwards` each row is read from its
    own last token to its first (not from the end of the padded row), and the
    output at step t is the state after reading tokens L_row-1 .. t; outputs
    stay aligned with the inputs.

    Weights: `kernel` [D + projection_dim, 4 units], `bias` [4 units],
    `projection_kernel` [units, projection_dim] (no bias).

    Args:
        units: int, cells.
        projection_dim: int, width of the output and of the recurrent input.
        cell_clip, projection_clip: float or None (no clipping).
        forget_bias: float, added to the forget gate's pre-activation.
        go_backwards: bool, read each row last token first.
        return_state: bool, also return the final (m [B, projection_dim],
            c [B, units]) of each row, to start the next batch from.

    Call arguments:
        inputs: [B, L, D]; L may be unknown until run time.
        mask: [B, L] bool, or None (every step is real).
        initial_state: (m, c) or None (zeros). For a backward layer it is the
            state before each row's last token.

    Example:
        >>> from keras import ops
        >>> from keras_bertology.layers import ProjectedLSTM
        >>> lstm = ProjectedLSTM(units=8, projection_dim=3, cell_clip=3.0, projection_clip=3.0,
        ...                      go_backwards=True, return_state=True)
        >>> x = ops.ones((2, 5, 4))
        >>> mask = ops.convert_to_tensor([[True] * 5, [True, True, True, False, False]])
        >>> outputs, m, c = lstm(x, mask=mask)
        >>> tuple(outputs.shape), tuple(m.shape), tuple(c.shape)
        ((2, 5, 3), (2, 3), (2, 8))
        >>> ops.convert_to_numpy(outputs[1, 3:]).tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """

    def __init__(self, units, projection_dim, cell_clip=None, projection_clip=None, forget_bias=1.0,
                 go_backwards=False, return_state=False, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.projection_clip = projection_clip
        self.forget_bias = forget_bias
        self.go_backwards = go_backwards
        self.return_state = return_state
        self.supports_masking = True
        self.init_recomputable()

    def build(self, input_shape):
        self.input_dim = input_shape[-1]
        self.kernel = self.add_weight(name="kernel", shape=(self.input_dim + self.projection_dim, 4 * self.units),
                                      initializer="glorot_uniform")
        self.bias = self.add_weight(name="bias", shape=(4 * self.units,), initializer="zeros")
        self.projection_kernel = self.add_weight(name="projection_kernel", shape=(self.units, self.projection_dim),
                                                 initializer="glorot_uniform")
        self.built = True

    def _step(self, recurrent_kernel, projection_kernel):
        """The recurrence's step: input [x_t @ kernel_x + bias; mask_t], state [m, c] -> (output, [m, c])."""

        def step(inputs, state):
            m_prev, c_prev = state
            real = inputs[:, -1:] > 0
            i, j, f, o = ops.split(inputs[:, :-1] + ops.matmul(m_prev, recurrent_kernel), 4, axis=-1)
            c = ops.sigmoid(f + self.forget_bias) * c_prev + ops.sigmoid(i) * ops.tanh(j)
            if self.cell_clip is not None:
                c = ops.clip(c, -self.cell_clip, self.cell_clip)
            m = ops.matmul(ops.sigmoid(o) * ops.tanh(c), projection_kernel)
            if self.projection_clip is not None:
                m = ops.clip(m, -self.projection_clip, self.projection_clip)
            return ops.where(real, m, ops.zeros_like(m)), [ops.where(real, m, m_prev), ops.where(real, c, c_prev)]

        return step

    def call(self, inputs, mask=None, initial_state=None, training=None):
        return self.run_block(self._forward, inputs, mask, initial_state, training=training)

    def _forward(self, inputs, mask, initial_state, training):
        dtype = self.compute_dtype
        inputs = ops.cast(inputs, dtype)
        batch = ops.shape(inputs)[0]
        if mask is None:
            mask = ops.ones(ops.shape(inputs)[:2], dtype="bool")
        mask = ops.cast(mask, "bool")
        if self.go_backwards:
            lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
            inputs = reverse_within_lengths(inputs, lengths)
        if initial_state is None:
            initial_state = (ops.zeros((batch, self.projection_dim), dtype), ops.zeros((batch, self.units), dtype))
        state = tuple(ops.cast(part, dtype) for part in initial_state)
        kernel = ops.cast(self.kernel, dtype)
        # The input half of every step's product at once; only m_{t-1} @ kernel_m stays in the loop.
        z = ops.matmul(inputs, kernel[:self.input_dim]) + ops.cast(self.bias, dtype)
        step = self._step(kernel[self.input_dim:], ops.cast(self.projection_kernel, dtype))
        # The mask rides as z's last column: the recurrence steps over one tensor.
        steps = ops.concatenate([z, ops.expand_dims(ops.cast(mask, dtype), -1)], axis=-1)
        outputs, m, c = _recurrence(step, self)(steps, initial_state=list(state))
        if self.go_backwards:
            outputs = reverse_within_lengths(outputs, lengths)
        return [outputs, m, c] if self.return_state else outputs

    def compute_mask(self, inputs, mask=None, initial_state=None):
        return [mask, None, None] if self.return_state else mask

    def compute_output_shape(self, input_shape):
        outputs = (*input_shape[:2], self.projection_dim)
        if self.return_state:
            return [outputs, (input_shape[0], self.projection_dim), (input_shape[0], self.units)]
        return outputs

    def get_config(self):
        return dict(super().get_config(), units=self.units, projection_dim=self.projection_dim,
                    cell_clip=self.cell_clip, projection_clip=self.projection_clip, forget_bias=self.forget_bias,
                    go_backwards=self.go_backwards, return_state=self.return_state)
