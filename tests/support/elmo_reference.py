"""ELMo's parts written in torch from a Keras model's weights: the oracle of the ELMo tests.

torch has the pieces ELMo is made of (embeddings, 1-D convolutions, `nn.LSTM` with a projection) but no
ELMo; these compose them as bilm-tf does. `nn.LSTM` cannot clip, so models compared with it are built
without clipping (the clips are checked against a NumPy loop in tests/models/elmo/test_elmo_layers.py).
"""

import numpy as np
import torch
from keras import ops


def _numpy(variable):
    return np.asarray(ops.convert_to_numpy(variable))


def _tensor(array):
    return torch.from_numpy(np.ascontiguousarray(array))


def torch_char_cnn(cnn, ids):
    """A `CharacterCNN`'s output for `ids` [B, L, C], computed in torch from its weights."""
    with torch.no_grad():
        table = _numpy(cnn.char_embedding.embeddings)
        chars = _tensor(table)[_tensor(ids.astype("int64"))].reshape(-1, ids.shape[-1], table.shape[1]).transpose(1, 2)
        features = []
        for conv in cnn.convolutions:
            kernel = _numpy(conv.kernel)  # [width, in, out]
            module = torch.nn.Conv1d(kernel.shape[1], kernel.shape[2], kernel.shape[0])
            module.weight.copy_(_tensor(kernel.transpose(2, 1, 0)))
            module.bias.copy_(_tensor(_numpy(conv.bias)))
            features.append(torch.relu(module(chars).max(dim=-1).values))
        x = torch.cat(features, dim=-1)
        dense = lambda layer, inputs: torch.nn.functional.linear(  # noqa: E731
            inputs, _tensor(_numpy(layer.kernel).T), _tensor(_numpy(layer.bias)))
        for transform, gate in zip(cnn.highway_transforms, cnn.highway_gates):
            share = torch.sigmoid(dense(gate, x))
            x = share * torch.relu(dense(transform, x)) + (1 - share) * x
        return dense(cnn.projection, x).reshape(*ids.shape[:2], -1).numpy()


def torch_lstm(kernel, bias, projection, forget_bias=1.0):
    """`torch.nn.LSTM(proj_size)` holding a `ProjectedLSTM`'s TensorFlow-layout weights: gate blocks i, j, f, o
    reordered to torch's i, f, g, o, and the run-time forget bias folded into the bias."""
    units, projection_dim = projection.shape
    input_dim = kernel.shape[0] - projection_dim
    blocks = np.split(np.arange(4 * units), 4)
    order = np.concatenate([blocks[0], blocks[2], blocks[1], blocks[3]])
    folded = bias.copy()
    folded[blocks[2]] += forget_bias
    lstm = torch.nn.LSTM(input_dim, units, proj_size=projection_dim, batch_first=True)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(_tensor(kernel[:input_dim, order].T))
        lstm.weight_hh_l0.copy_(_tensor(kernel[input_dim:, order].T))
        lstm.bias_ih_l0.copy_(_tensor(folded[order]))
        lstm.bias_hh_l0.zero_()
        lstm.weight_hr_l0.copy_(_tensor(projection.T))
    return lstm


def torch_layer_lstm(layer):
    """`torch_lstm` of a Keras `ProjectedLSTM` layer."""
    return torch_lstm(_numpy(layer.kernel), _numpy(layer.bias), _numpy(layer.projection_kernel), layer.forget_bias)


def torch_elmo(backbone, char_ids, lengths):
    """Every output of an `ElmoBackbone` (built without clipping, dropout off) for `char_ids` [B, L, C] whose row
    b holds `lengths[b]` tokens, from torch: each row run alone on its own tokens, the backward stack on them
    reversed, a residual connection around every layer but the first."""
    tokens = torch_char_cnn(backbone.get_layer("char_cnn"), char_ids)
    batch, length = char_ids.shape[:2]
    width = backbone.projection_dim
    outputs = {name: np.zeros((batch, length, size)) for name, size in (
        ("forward_output", width), ("backward_output", width),
        *((f"lstm_outputs_{index + 1}", 2 * width) for index in range(backbone.num_layers)))}
    with torch.no_grad():
        for row, count in enumerate(lengths):
            for side, direction in enumerate(("forward", "backward")):
                states = _tensor(tokens[row:row + 1, :count])
                if direction == "backward":
                    states = states.flip(1)
                for index in range(backbone.num_layers):
                    lstm = torch_layer_lstm(backbone.get_layer(f"{direction}_lstm_{index}"))
                    output = lstm(states)[0]
                    states = output if index == 0 else output + states
                    aligned = states.flip(1) if direction == "backward" else states
                    columns = slice(side * width, (side + 1) * width)
                    outputs[f"lstm_outputs_{index + 1}"][row, :count, columns] = aligned[0].numpy()
                outputs[f"{direction}_output"][row, :count] = aligned[0].numpy()
    outputs["token_output"] = tokens
    return outputs
