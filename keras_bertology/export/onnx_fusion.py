"""Layer norms and GELUs that tf2onnx wrote out op by op, put back as what ONNX Runtime runs as one kernel, and
the shape arithmetic around its products and reshapes dropped.

tf2onnx converts Keras's LayerNormalization as TensorFlow computes it: two means (GlobalAveragePool), a
difference, a square, a reciprocal square root and four products and sums, thirteen nodes a norm, which
ONNX Runtime neither fuses nor runs as one kernel (nor as SkipLayerNormalization with the residual sum
before it). Written as the one operator that opset 17 defines, each norm is one kernel.

Keras's exact GELU arrives as 0.5 x (1 - erf(-x / sqrt 2)) (TensorFlow's erfc, which the export writes as
1 - erf), six nodes that ONNX Runtime does not recognise. Written as 0.5 x (1 + erf(x / sqrt 2)) in the
order its session optimizer looks for (Div, Erf, Add, Mul, Mul), still standard ONNX, it becomes one Gelu
kernel when a session loads the file.

Keras's Dense on [B, L, H] is TensorFlow's tensordot: the input reshaped to [B x L, H], a MatMul, and the
product reshaped back to [B, L, U], each shape computed in the graph from the input's (Shape, Gather,
ReduceProd, Concat, Casts): about ten nodes around each product, most of a short input's time in ONNX
Runtime, where each node costs a fixed time. ONNX's MatMul takes the [B, L, H] input as it is, so the
product alone remains. Splitting and merging attention heads reshapes a tensor to its own leading
dimensions and constants, each dimension read from its shape in the graph (Shape, Cast, Slice, Concat);
ONNX's Reshape says "keep this dimension" with a 0, so the shape becomes a constant. BERT-Mini's file goes
from 499 nodes to 171.

Only the exact patterns are replaced: every intermediate value used by the pattern alone, the scale and bias
constants whose leading axes are 1, the epsilon and the GELU's constants scalars, the tensordot's shapes
those of its input's leading axes and its one contracted axis, a reshape's kept dimensions its own input's
at the same places. The export's self-check against the Keras model still decides whether the file is kept.
"""

import numpy as np
from onnx import helper, numpy_helper


class _Graph:
    """Look-ups over one ONNX graph: each value's consumers, the constants and the graph's outputs."""

    def __init__(self, graph):
        self.consumers = {}
        for node in graph.node:
            for name in dict.fromkeys(_read_by(node)):  # a node reading a value twice (x * x) is one consumer
                self.consumers.setdefault(name, []).append(node)
        self.constants = {tensor.name: tensor for tensor in graph.initializer}
        self.outputs = {value.name for value in graph.output}
        self.producers = {output: node for node in graph.node for output in node.output}

    def produced_by(self, value, op_type):
        """The node that computes `value`, if it is an `op_type`."""
        node = self.producers.get(value)
        return node if node is not None and node.op_type == op_type else None

    def only_consumer(self, value, op_type):
        """The one node that reads `value`, if it is an `op_type` and nothing else (no graph output) reads it."""
        users = self.consumers.get(value, [])
        if len(users) == 1 and users[0].op_type == op_type and value not in self.outputs:
            return users[0]
        return None

    def constant(self, name):
        return numpy_helper.to_array(self.constants[name]) if name in self.constants else None


def _read_by(node):
    """The values `node` reads: its inputs, and those its subgraphs (an If's branches, a Loop's body) read
    from the graph around them."""
    names = list(node.input)
    for attribute in node.attribute:
        for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            inner = {value.name for value in subgraph.input} | {tensor.name for tensor in subgraph.initializer} | \
                {output for inner_node in subgraph.node for output in inner_node.output}
            names += [name for inner_node in subgraph.node for name in _read_by(inner_node) if name not in inner]
            names += [value.name for value in subgraph.output if value.name not in inner]
    return names


def _other(node, known):
    """The input of a two-input `node` that is not `known` (None where neither or both are)."""
    first, second = node.input
    if first == known and second != known:
        return second
    if second == known and first != known:
        return first
    return None


def _match(graph, mean):
    """(nodes to remove, x, the names of the scale and bias constants, epsilon, output) of the layer norm whose
    first mean is `mean`, or None where the nodes around it are not exactly tf2onnx's layer norm."""
    x = mean.input[0]
    users = graph.consumers.get(mean.output[0], [])
    if sorted(node.op_type for node in users) != ["Neg", "Sub"] or mean.output[0] in graph.outputs:
        return None
    negated = next(node for node in users if node.op_type == "Neg")
    difference = next(node for node in users if node.op_type == "Sub")
    if list(difference.input) != [x, mean.output[0]]:
        return None
    square = graph.only_consumer(difference.output[0], "Mul")
    if square is None or list(square.input) != [difference.output[0]] * 2:
        return None
    variance = graph.only_consumer(square.output[0], "GlobalAveragePool")
    shifted = variance and graph.only_consumer(variance.output[0], "Add")
    root = shifted and graph.only_consumer(shifted.output[0], "Sqrt")
    inverse = root and graph.only_consumer(root.output[0], "Reciprocal")
    scaled = inverse and graph.only_consumer(inverse.output[0], "Mul")
    if scaled is None:
        return None
    epsilon = graph.constant(_other(shifted, variance.output[0]))
    scale_name = _other(scaled, inverse.output[0])
    scale = graph.constant(scale_name)
    users = graph.consumers.get(scaled.output[0], [])
    if epsilon is None or epsilon.size != 1 or scale is None or len(users) != 2 or \
            {node.op_type for node in users} != {"Mul"} or scaled.output[0] in graph.outputs:
        return None
    times_x = next((node for node in users if _other(node, scaled.output[0]) == x), None)
    times_mean = next((node for node in users if _other(node, scaled.output[0]) == negated.output[0]), None)
    if times_x is None or times_mean is None or graph.consumers.get(negated.output[0]) != [times_mean] or \
            negated.output[0] in graph.outputs:
        return None
    biased = graph.only_consumer(times_mean.output[0], "Add")
    bias_name = biased and _other(biased, times_mean.output[0])
    if bias_name is None or graph.constant(bias_name) is None:
        return None
    total = graph.only_consumer(biased.output[0], "Add")
    if total is None or set(total.input) != {times_x.output[0], biased.output[0]} or \
            graph.only_consumer(times_x.output[0], "Add") is not total:
        return None
    nodes = [mean, negated, difference, square, variance, shifted, root, inverse, scaled, times_x, times_mean,
             biased, total]
    return nodes, x, (scale_name, bias_name), float(epsilon.reshape(())), total.output[0]


def _trailing(values):
    """`values` without its leading axes of size 1 (a [1, 1, H] scale as [H]); None where one is larger, or
    where it is a scalar."""
    if values.ndim == 0 or any(size != 1 for size in values.shape[:-1]):
        return None
    return values.reshape(values.shape[-1:])


def fuse_layer_norms(model):
    """`model` (an ONNX ModelProto, changed in place) with each of tf2onnx's written-out layer norms made one
    LayerNormalization; returns how many were."""
    graph = _Graph(model.graph)
    replaced, made, fused = {}, {}, 0
    for node in list(model.graph.node):
        if node.op_type != "GlobalAveragePool" or id(node) in replaced:
            continue
        match = _match(graph, node)
        if match is None:
            continue
        nodes, x, sources, epsilon, output = match
        values = [_trailing(graph.constant(source)) for source in sources]
        if any(value is None for value in values) or values[0].shape != values[1].shape:
            continue
        names = []
        for source, value in zip(sources, values):  # one [H] constant per source (tf2onnx shares equal ones)
            if source not in made:
                made[source] = f"{source}_as_norm_weights"
                model.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), made[source]))
            names.append(made[source])
        # GlobalAveragePool means over every axis from the third: the norm's axis is 2, whatever the rank.
        norm = helper.make_node("LayerNormalization", [x, *names], [output], name=f"{output}_fused",
                                axis=2, epsilon=epsilon)
        for removed in nodes:
            replaced[id(removed)] = None
        replaced[id(nodes[-1])] = norm  # where the last node stood, after everything the norm reads
        fused += 1
    kept = [replaced.get(id(node), node) for node in model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(node for node in kept if node is not None)
    _drop_unused_constants(model.graph)
    return fused


def _scalar(graph, name, value):
    """Whether `name` is a one-element constant equal to `value` (to float32's precision)."""
    constant = graph.constant(name) if name is not None else None
    return constant is not None and constant.size == 1 and abs(float(constant.reshape(())) - value) <= 1e-6


def _match_gelu(graph, erf):
    """(nodes to remove, x, output) of the written-out GELU around `erf`: 0.5 x times (1 - erf(-x times
    1/sqrt 2)); None where the nodes around it are not exactly that."""
    scaled = graph.produced_by(erf.input[0], "Mul")
    negated = scaled and next(filter(None, (graph.produced_by(name, "Neg") for name in scaled.input)), None)
    if negated is None or graph.only_consumer(scaled.output[0], "Erf") is not erf or \
            graph.only_consumer(negated.output[0], "Mul") is not scaled or \
            not _scalar(graph, _other(scaled, negated.output[0]), 2 ** -0.5):
        return None
    x = negated.input[0]
    complement = graph.only_consumer(erf.output[0], "Sub")
    if complement is None or complement.input[1] != erf.output[0] or not _scalar(graph, complement.input[0], 1.0):
        return None
    product = graph.only_consumer(complement.output[0], "Mul")
    half = product and graph.produced_by(_other(product, complement.output[0]), "Mul")
    if half is None or graph.only_consumer(half.output[0], "Mul") is not product or \
            not _scalar(graph, _other(half, x), 0.5):
        return None
    dtype = graph.constant(_other(half, x)).dtype  # the GELU's own precision (a bf16 model's is bf16)
    return [half, negated, scaled, erf, complement, product], x, product.output[0], dtype


def fuse_gelus(model):
    """`model` (an ONNX ModelProto, changed in place) with each of tf2onnx's written-out exact GELUs in the
    form ONNX Runtime's optimizer makes one Gelu kernel of; returns how many were."""
    graph = _Graph(model.graph)
    replaced, made, fused = {}, {}, 0
    for node in list(model.graph.node):
        match = _match_gelu(graph, node) if node.op_type == "Erf" else None
        if match is None:
            continue
        nodes, x, output, dtype = match
        names = {}
        for key, value in (("sqrt2", 2 ** 0.5), ("one", 1.0), ("half", 0.5)):  # one constant per value and dtype
            if (key, dtype) not in made:
                made[key, dtype] = _unused_name(graph, f"gelu_{key}_{dtype}")
                model.graph.initializer.append(numpy_helper.from_array(np.array(value, dtype), made[key, dtype]))
            names[key] = made[key, dtype]
        step = f"{output}_gelu"
        written = [helper.make_node("Div", [x, names["sqrt2"]], [f"{step}_scaled"]),
                   helper.make_node("Erf", [f"{step}_scaled"], [f"{step}_erf"]),
                   helper.make_node("Add", [f"{step}_erf", names["one"]], [f"{step}_shifted"]),
                   helper.make_node("Mul", [x, f"{step}_shifted"], [f"{step}_product"]),
                   helper.make_node("Mul", [f"{step}_product", names["half"]], [output])]
        for removed in nodes:
            replaced[id(removed)] = []
        replaced[id(nodes[-1])] = written  # where the last node stood, after everything the GELU reads
        fused += 1
    kept = [new for node in model.graph.node for new in replaced.get(id(node), [node])]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    _drop_unused_constants(model.graph)
    return fused


def _through_casts(graph, value):
    """The node that computes `value`, past the Casts that tf2onnx puts between shape computations."""
    node = graph.producers.get(value)
    while node is not None and node.op_type == "Cast":
        node = graph.producers.get(node.input[0])
    return node


def _gathered_axes(graph, value, x):
    """The axes of `x`'s shape that `value` is (Gather(Shape(x), constant axes)), or None."""
    gather = _through_casts(graph, value)
    if gather is None or gather.op_type != "Gather" or any(a.name == "axis" and a.i != 0 for a in gather.attribute):
        return None
    axes = graph.constant(gather.input[1])
    if not _is_shape_of(graph, gather.input[0], x) or axes is None:
        return None
    return axes.reshape(-1).tolist()


def _is_shape_of(graph, value, x):
    """Whether `value` is x's whole shape (Shape(x), through Casts)."""
    shape = _through_casts(graph, value)
    return shape is not None and shape.op_type == "Shape" and list(shape.input) == [x] and not len(shape.attribute)


def _product_of_axes(graph, value, x):
    """The axes of `x`'s shape whose product `value` is (ReduceProd of `_gathered_axes`, kept as one value),
    or None."""
    node = _through_casts(graph, value)
    if node is not None and node.op_type == "Unsqueeze":
        node = _through_casts(graph, node.input[0])
    if node is None or node.op_type != "ReduceProd" or len(node.input) != 1:
        return None
    return _gathered_axes(graph, node.input[0], x)


def _concatenated(graph, value):
    """The inputs of the axis-0 Concat that `value` is, or None."""
    node = _through_casts(graph, value)
    if node is None or node.op_type != "Concat" or any(a.name == "axis" and a.i != 0 for a in node.attribute):
        return None
    return list(node.input)


def _match_tensordot(graph, product):
    """(the Reshape after it, x, output) of the tensordot whose MatMul is `product`: x [..., H] reshaped to
    [-1, H], times a constant [H, U], reshaped to x's leading axes and U; or None. The Reshape before it may
    feed other products too (tf2onnx gives the query, key and value projections one): it goes when the
    last of them no longer reads it."""
    weights = graph.constant(product.input[1])
    flatten = graph.produced_by(product.input[0], "Reshape")
    restore = graph.only_consumer(product.output[0], "Reshape")
    if weights is None or weights.ndim != 2 or flatten is None or restore is None:
        return None
    x = flatten.input[0]
    flat_shape, out_shape = _concatenated(graph, flatten.input[1]), _concatenated(graph, restore.input[1])
    if flat_shape is None or out_shape is None or len(flat_shape) != 2 or len(out_shape) != 2:
        return None
    leading = _gathered_axes(graph, out_shape[0], x)
    units = graph.constant(out_shape[1])
    if leading is None or leading != list(range(len(leading))) or units is None or \
            units.reshape(-1).tolist() != [weights.shape[1]] or \
            _product_of_axes(graph, flat_shape[0], x) != leading or \
            _product_of_axes(graph, flat_shape[1], x) != [len(leading)]:
        return None
    return restore, x, restore.output[0]


def fuse_tensordots(model):
    """`model` (an ONNX ModelProto, changed in place) with each of tf2onnx's tensordots over the last axis of
    its input one MatMul on that input, the shape computations no longer read dropped; returns how many
    were."""
    graph = _Graph(model.graph)
    removed, fused = set(), 0
    for node in model.graph.node:
        match = _match_tensordot(graph, node) if node.op_type == "MatMul" else None
        if match is None:
            continue
        restore, x, output = match
        node.input[0], node.output[0] = x, output
        removed.add(id(restore))
        fused += 1
    kept = [node for node in model.graph.node if id(node) not in removed]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    _drop_unread_nodes(model.graph)
    _drop_unused_constants(model.graph)
    return fused


def _kept_dimension(graph, value, x):
    """The axis of `x` whose length `value` is (Slice(Shape(x), [i], [i + 1]), through Casts), or None."""
    piece = _through_casts(graph, value)
    if piece is None or piece.op_type != "Slice" or not 3 <= len(piece.input) <= 5:
        return None
    bounds = [graph.constant(name) for name in piece.input[1:]]
    if not _is_shape_of(graph, piece.input[0], x) or any(bound is None or bound.size != 1 for bound in bounds):
        return None
    start, end, *rest = (int(bound.reshape(())) for bound in bounds)
    return start if end == start + 1 and start >= 0 and rest in ([], [0], [0, 1]) else None


def _constant_shape(graph, reshape):
    """The shape `reshape` gives its input as a constant, 0 where it keeps the input's own dimension, or None
    where its shape is not the input's leading dimensions followed by nonzero constants."""
    pieces = _concatenated(graph, reshape.input[1])
    if pieces is None or any(a.name == "allowzero" and a.i for a in reshape.attribute):
        return None
    shape = []
    for piece in pieces:
        fixed = graph.constant(piece)
        if fixed is not None:
            if fixed.ndim != 1 or not fixed.all():
                return None
            shape += fixed.tolist()
        elif _kept_dimension(graph, piece, reshape.input[0]) == len(shape):
            shape.append(0)
        else:
            return None
    return np.array(shape, "int64") if 0 in shape else None


def fuse_reshape_shapes(model):
    """`model` (an ONNX ModelProto, changed in place) with the shape of each Reshape that keeps its input's
    leading dimensions a constant (0 for each kept one), the shape computations no longer read dropped;
    returns how many were."""
    graph = _Graph(model.graph)
    fused = 0
    for node in model.graph.node:
        shape = _constant_shape(graph, node) if node.op_type == "Reshape" else None
        if shape is None:
            continue
        name = _unused_name(graph, f"{node.output[0]}_shape")
        graph.constants[name] = numpy_helper.from_array(shape, name)
        model.graph.initializer.append(graph.constants[name])
        node.input[1] = name
        fused += 1
    _drop_unread_nodes(model.graph)
    _drop_unused_constants(model.graph)
    return fused


def _drop_unread_nodes(graph):
    """The nodes none of whose outputs is read any more (by a node, a subgraph or the graph's outputs)
    removed, and then those that only they read."""
    while True:
        read = {name for node in graph.node for name in _read_by(node)} | {value.name for value in graph.output}
        kept = [node for node in graph.node if any(output in read for output in node.output)]
        if len(kept) == len(graph.node):
            return
        del graph.node[:]
        graph.node.extend(kept)


def _unused_name(graph, name):
    """`name`, or `name` with a number after it, that no value of the graph has."""
    taken = set(graph.constants) | set(graph.producers) | set(graph.consumers)
    candidates = (name if index == 0 else f"{name}_{index}" for index in range(len(taken) + 1))
    return next(candidate for candidate in candidates if candidate not in taken)


def _drop_unused_constants(graph):
    """The initializers no node reads any more (the written-out norms' scales, biases and epsilons) removed."""
    read = {name for node in graph.node for name in _read_by(node)} | {value.name for value in graph.output}
    kept = [tensor for tensor in graph.initializer if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
