"""Training FLOPs of a pretrainer, counted from the graph TensorFlow traces of one step.

Comparing objectives at equal compute (`bertology study`) needs the cost of
a step of each, and that cost differs by far more than the encoder: ELECTRA
adds a generator, XLNet a second stream over a few targets, SpanBERT a
boundary head, a two-stage run trains one half and only runs the other.
Counting the multiply-adds of the traced step (forward, loss and the
gradients actually taken) gets all of that right for any pretrainer, with
no formula per family. Only matrix products and convolutions are counted
(MatMul, BatchMatMul, Einsum, Conv2D and its two gradients: 2 FLOPs per
multiply-add), as model-FLOPs accounting usually does; element-wise work,
embedding look-ups and the optimizer's update are left out. A loop (a
recurrent layer's scan, and its gradient) counts its body once per
iteration: as many as the elements of the lists it reads or writes.
"""

import math
import re

import tensorflow as tf

from keras_bertology.errors import ConfigError

_MATMULS = ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_LOOPS = ("While", "StatelessWhile")
# Each convolution op's (filter, convolution output) tensors: the forward op and both gradients multiply the
# same pairs.
_CONVOLUTIONS = {"Conv2D": (lambda op: op.inputs[1], lambda op: op.outputs[0]),
                 "Conv2DBackpropInput": (lambda op: op.inputs[1], lambda op: op.inputs[2]),
                 "Conv2DBackpropFilter": (lambda op: op.outputs[0], lambda op: op.inputs[2])}


def step_flops(pretrainer, batch):
    """Matmul FLOPs of one training step of the compiled `pretrainer` on `batch` (x, y, sample_weight),
    with the variables that train now (see `training_stages`)."""
    x, y, sample_weight = batch
    variables = pretrainer.trainable_variables

    @tf.function(autograph=False)
    def step(x, y, sample_weight):
        # Only the training variables are watched: a tape watching every variable it meets would also
        # trace the gradients of a frozen stage, which the step never runs.
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([variable.value for variable in variables])  # the TensorFlow variables
            y_pred = pretrainer(x, training=True)
            loss = pretrainer.compute_loss(x, y, y_pred, sample_weight, training=True)
        return loss, tape.gradient(loss, variables)

    return graph_flops(step.get_concrete_function(x, y, sample_weight).graph)


def pretraining_flops(pretrainer, batch, total_steps):
    """(total FLOPs of `total_steps` steps, [(steps, FLOPs per step) per stage]) of `pretrainer`,
    following its stages (`Pretrainer.training_stages`); the pretrainer is left in its first stage."""
    stages = [(steps, stage) for steps, stage in pretrainer.training_stages(total_steps) if steps > 0]
    counted = []
    for steps, stage in stages:
        pretrainer.set_stage(stage)
        counted.append((steps, step_flops(pretrainer, batch)))
    pretrainer.set_stage(stages[0][1])
    return sum(steps * flops for steps, flops in counted), counted


def graph_flops(graph):
    """FLOPs of every matrix product and convolution that `graph` runs, in it and in the bodies of its loops
    (shapes must be known)."""
    total = 0
    for op in _run_operations(graph):
        if op.type in _MATMULS:
            total += _matmul_flops(op)
        elif op.type == "Einsum":
            total += _einsum_flops(op)
        elif op.type in _CONVOLUTIONS:
            total += _convolution_flops(op)
        elif op.type in _LOOPS:
            total += _loop_iterations(op) * graph_flops(graph._get_function(op.get_attr("body").name).graph)
    return total


def _run_operations(graph):
    """The operations of `graph` that its outputs need: TensorFlow prunes the others and never runs them
    (Keras' recurrence on TensorFlow calls its step once outside the loop only to learn its output's shape)."""
    needed = [tensor.op for tensor in graph.outputs] + list(graph.control_outputs)
    seen = set()
    while needed:
        op = needed.pop()
        if op.name not in seen:
            seen.add(op.name)
            needed += [tensor.op for tensor in op.inputs] + list(op.control_inputs)
    return [op for op in graph.get_operations() if op.name in seen]


def _convolution_flops(op):
    """2 x each output value x the filter's window and input channels ([h, w, in, out] filters)."""
    window, output = (tensor(op) for tensor in _CONVOLUTIONS[op.type])
    height, width, channels, _ = _dims(window, op)
    return 2 * math.prod(_dims(output, op)) * height * width * channels


def _loop_iterations(op):
    """How often a loop runs: the length of the sequences it reads, which it takes as tensor lists made
    from tensors (a scan's inputs; its gradient's, the gradients of the scan's outputs)."""
    lengths = {tensor.op.inputs[0].shape[0] for tensor in op.inputs if tensor.op.type == "TensorListFromTensor"}
    if len(lengths) != 1 or None in lengths:
        raise ConfigError(f"cannot count the FLOPs of loop {op.name}: its number of iterations is not known "
                          f"(it reads sequences of lengths {sorted(lengths, key=str)}); count them on a batch of "
                          "fixed shape")
    return lengths.pop()


def _dims(tensor, op):
    shape = tensor.shape
    if shape.rank is None or any(d is None for d in shape.as_list()):
        raise ConfigError(f"cannot count the FLOPs of {op.type} {op.name}: its input shape {shape} is not "
                          "fully known; count them on a batch of fixed shape")
    return shape.as_list()


def _matmul_flops(op):
    a = _dims(op.inputs[0], op)
    transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
    contracted = a[-2] if transposed else a[-1]
    return 2 * contracted * math.prod(_dims(op.outputs[0], op))


def _einsum_flops(op):
    """2 x the product of every index's size: each combination of indices is one multiply-add."""
    equation = op.get_attr("equation").decode()
    operands = re.sub(r"\s", "", equation).split("->")[0].split(",")
    if len(operands) == 1:
        return 0  # a transpose or a sum: no products
    sizes = {}
    for letters, tensor in zip(operands, op.inputs):
        dims = _dims(tensor, op)
        if "." in letters:
            raise ConfigError(f"cannot count the FLOPs of Einsum {equation!r} with an ellipsis")
        for letter, size in zip(letters, dims):
            sizes[letter] = max(sizes.get(letter, 1), size)  # a broadcast 1 takes the other's size
    return 2 * math.prod(sizes.values())
