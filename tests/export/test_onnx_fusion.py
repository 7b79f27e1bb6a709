"""keras_bertology/export/onnx_fusion.py: tf2onnx's written-out layer norm made one LayerNormalization, its
written-out GELU the form ONNX Runtime makes one Gelu kernel of, and its tensordots one MatMul each, only where
nothing else reads the values they remove and the shapes are exactly those (the exports' own files:
tests/export/test_onnx.py)."""

import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from keras_bertology.export.onnx_fusion import fuse_gelus, fuse_layer_norms, fuse_reshape_shapes, fuse_tensordots

HIDDEN, EPSILON = 6, 1e-3


def _written_out_norm(also_output=None, read_by_branch=None):
    """A [B, L, HIDDEN] layer norm as tf2onnx writes Keras's (13 nodes), its scale and bias [1, 1, HIDDEN];
    `also_output` names an intermediate the graph also gives out, `read_by_branch` one that an If's branch
    reads."""
    rng = np.random.default_rng(0)
    constants = [numpy_helper.from_array(rng.normal(size=(1, 1, HIDDEN)).astype("float32"), "gamma"),
                 numpy_helper.from_array(rng.normal(size=(1, 1, HIDDEN)).astype("float32"), "beta"),
                 numpy_helper.from_array(np.array(EPSILON, "float32"), "eps")]
    node = helper.make_node
    nodes = [node("GlobalAveragePool", ["x"], ["mean"]), node("Neg", ["mean"], ["neg"]),
             node("Sub", ["x", "mean"], ["diff"]), node("Mul", ["diff", "diff"], ["sq"]),
             node("GlobalAveragePool", ["sq"], ["var"]), node("Add", ["var", "eps"], ["shifted"]),
             node("Sqrt", ["shifted"], ["root"]), node("Reciprocal", ["root"], ["inverse"]),
             node("Mul", ["inverse", "gamma"], ["scaled"]), node("Mul", ["x", "scaled"], ["times_x"]),
             node("Mul", ["neg", "scaled"], ["times_mean"]), node("Add", ["times_mean", "beta"], ["biased"]),
             node("Add", ["times_x", "biased"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, HIDDEN])]
    if also_output:
        outputs.append(helper.make_tensor_value_info(also_output, TensorProto.FLOAT, None))
    if read_by_branch:
        branch = helper.make_graph([node("Identity", [read_by_branch], ["branch_out"])], "branch", [],
                                   [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, None)])
        constants.append(numpy_helper.from_array(np.array(True), "always"))
        nodes.append(node("If", ["always"], ["from_branch"], then_branch=branch, else_branch=branch))
        outputs.append(helper.make_tensor_value_info("from_branch", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, HIDDEN])],
                              outputs, constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model, x):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_the_written_out_norm_becomes_one_layer_normalization_with_the_same_values():
    model = _written_out_norm()
    x = np.random.default_rng(1).normal(2.0, 3.0, (2, 3, HIDDEN)).astype("float32")
    gamma, beta = (numpy_helper.to_array(t).reshape(HIDDEN) for t in model.graph.initializer[:2])
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + EPSILON) * gamma + beta
    np.testing.assert_allclose(_run(model, x)[0], expected, atol=1e-5)  # the pattern is a layer norm
    assert fuse_layer_norms(model) == 1
    onnx.checker.check_model(model)
    (norm,) = model.graph.node
    assert norm.op_type == "LayerNormalization" and list(norm.output) == ["y"]
    assert {a.name: helper.get_attribute_value(a) for a in norm.attribute} == pytest.approx(
        {"axis": 2, "epsilon": EPSILON})
    assert sorted(t.name for t in model.graph.initializer) == sorted(norm.input[1:])  # the old constants gone
    np.testing.assert_allclose(_run(model, x)[0], expected, atol=1e-5)


@pytest.mark.parametrize("reader", [{"also_output": "var"}, {"also_output": "scaled"},
                                    {"read_by_branch": "inverse"}, {"read_by_branch": "neg"}],
                         ids=["variance-given-out", "scale-given-out", "read-in-a-branch", "mean-read-in-a-branch"])
def test_a_norm_whose_values_something_else_reads_is_left_as_it_is(reader):
    model = _written_out_norm(**reader)
    x = np.random.default_rng(2).normal(size=(2, 3, HIDDEN)).astype("float32")
    before = _run(model, x)
    assert fuse_layer_norms(model) == 0
    assert len(model.graph.node) == len(_written_out_norm(**reader).graph.node)
    for got, expected in zip(_run(model, x), before):
        np.testing.assert_array_equal(got, expected)


def _written_out_gelu(also_output=None):
    """Keras's exact GELU as the export writes it: 0.5 x times (1 - erf(-x times 1/sqrt 2)), six nodes, with
    the Erfc rewritten as 1 - Erf; `also_output` names an intermediate the graph also gives out."""
    constants = [numpy_helper.from_array(np.array(value, "float32"), name)
                 for name, value in (("half", 0.5), ("rsqrt2", 2 ** -0.5), ("one", 1.0))]
    node = helper.make_node
    nodes = [node("Mul", ["half", "x"], ["halved"]), node("Neg", ["x"], ["negated"]),
             node("Mul", ["negated", "rsqrt2"], ["scaled"]), node("Erf", ["scaled"], ["erf"]),
             node("Sub", ["one", "erf"], ["complement"]), node("Mul", ["halved", "complement"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, HIDDEN])]
    if also_output:
        outputs.append(helper.make_tensor_value_info(also_output, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, HIDDEN])],
                              outputs, constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _kernels(model):
    """The operators of `model` as an ONNX Runtime session runs them, after its graph optimizations."""
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(Path(tempfile.mkdtemp()) / "optimized.onnx")
    onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


def test_the_written_out_gelu_becomes_one_kernel_in_onnx_runtime_with_the_same_values():
    model = _written_out_gelu()
    x = np.random.default_rng(3).normal(0.0, 3.0, (2, 3, HIDDEN)).astype("float32")
    expected = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(_run(model, x)[0], expected, atol=1e-6)  # the pattern is the exact GELU
    assert "Gelu" not in _kernels(model)
    assert fuse_gelus(model) == 1
    onnx.checker.check_model(model)
    assert [node.op_type for node in model.graph.node] == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert model.graph.node[-1].output == ["y"] and len(model.graph.initializer) == 3  # the old constants gone
    np.testing.assert_allclose(_run(model, x)[0], expected, atol=1e-6)
    assert _kernels(model) == ["Gelu"]


@pytest.mark.parametrize("given_out", ["halved", "negated", "erf", "complement"])
def test_a_gelu_whose_values_something_else_reads_is_left_as_it_is(given_out):
    model = _written_out_gelu(also_output=given_out)
    assert fuse_gelus(model) == 0
    assert [node.op_type for node in model.graph.node] == [node.op_type for node in _written_out_gelu().graph.node]


def test_a_gelu_of_other_constants_is_left_as_it_is():
    model = _written_out_gelu()
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array(0.7, "float32"), "rsqrt2"))
    assert fuse_gelus(model) == 0


UNITS = 5


def _tensordot(products=1, free=(0, 1), contracted=(2,), inner=(HIDDEN,)):
    """x [B, L, *inner] times constant [prod(inner), UNITS] matrices as tf2onnx writes Keras's Dense: x reshaped to
    [prod of the `free` axes, prod of the `contracted` ones] (one Reshape for all `products`, as tf2onnx
    shares it), a MatMul each, each product reshaped to the `free` axes and UNITS; outputs y0, y1, ..."""
    rng = np.random.default_rng(4)
    node = helper.make_node
    int32 = TensorProto.INT32
    constants = [numpy_helper.from_array(np.array(free, "int64"), "free"),
                 numpy_helper.from_array(np.array(contracted, "int64"), "axes"),
                 numpy_helper.from_array(np.array([0], "int64"), "zero"),
                 numpy_helper.from_array(np.array([UNITS], "int32"), "units")]
    nodes = [node("Shape", ["x"], ["shape"]), node("Cast", ["shape"], ["shape32"], to=int32),
             node("Gather", ["shape32", "free"], ["free_dims"]), node("Gather", ["shape32", "axes"], ["axes_dims"]),
             node("ReduceProd", ["free_dims"], ["rows"], keepdims=0),
             node("ReduceProd", ["axes_dims"], ["columns"], keepdims=0),
             node("Unsqueeze", ["rows", "zero"], ["rows1"]), node("Unsqueeze", ["columns", "zero"], ["columns1"]),
             node("Concat", ["rows1", "columns1"], ["flat32"], axis=0),
             node("Cast", ["flat32"], ["flat_shape"], to=TensorProto.INT64),
             node("Reshape", ["x", "flat_shape"], ["flat"]),
             node("Concat", ["free_dims", "units"], ["out32"], axis=0),
             node("Cast", ["out32"], ["out_shape"], to=TensorProto.INT64)]
    outputs = []
    for index in range(products):
        weights = rng.normal(size=(int(np.prod(inner)), UNITS)).astype("float32")
        constants.append(numpy_helper.from_array(weights, f"w{index}"))
        nodes += [node("MatMul", ["flat", f"w{index}"], [f"product{index}"]),
                  node("Reshape", [f"product{index}", "out_shape"], [f"y{index}"])]
        outputs.append(helper.make_tensor_value_info(f"y{index}", TensorProto.FLOAT, ["batch", "length", UNITS]))
    graph = helper.make_graph(nodes, "tensordot", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", "length", *inner])], outputs, constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run_all(model, x):
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


@pytest.mark.parametrize("products", [1, 3])
def test_each_tensordot_over_the_last_axis_becomes_one_matmul_with_the_same_values(products):
    model = _tensordot(products)
    weights = [numpy_helper.to_array(tensor) for tensor in model.graph.initializer if tensor.name.startswith("w")]
    x = np.random.default_rng(5).normal(size=(3, 7, HIDDEN)).astype("float32")
    expected = _run_all(model, x)
    np.testing.assert_allclose(expected[-1], x @ weights[-1], rtol=1e-6)  # the pattern is the product
    assert fuse_tensordots(model) == products
    onnx.checker.check_model(model)
    assert [node.op_type for node in model.graph.node] == ["MatMul"] * products  # the shape work gone with them
    assert sorted(tensor.name for tensor in model.graph.initializer) == [f"w{index}" for index in range(products)]
    for got, want in zip(_run_all(model, x), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    other_shape = np.ones((1, 2, HIDDEN), "float32")  # both leading axes still dynamic
    assert _run_all(model, other_shape)[0].shape == (1, 2, UNITS)


@pytest.mark.parametrize("case", ["two contracted axes", "leading axes swapped", "other units",
                                  "another tensor's shape"])
def test_a_tensordot_of_other_axes_or_shapes_is_left_as_it_is(case):
    model = _tensordot(contracted=(2, 3), inner=(2, 3)) if case == "two contracted axes" else \
        _tensordot(free=(1, 0)) if case == "leading axes swapped" else _tensordot()
    if case == "other units":  # the restored shape names more units than the weights have
        model.graph.initializer[3].CopyFrom(numpy_helper.from_array(np.array([UNITS + 1], "int32"), "units"))
    if case == "another tensor's shape":  # the shapes read from a second input, not from x
        model.graph.input.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, ["batch", 4, HIDDEN]))
        model.graph.node[0].input[0] = "other"
    kinds = [node.op_type for node in model.graph.node]
    assert fuse_tensordots(model) == 0
    assert [node.op_type for node in model.graph.node] == kinds


def _head_split(first=0, second=1, shape_of="x", allowzero=0):
    """x [B, L, 8] reshaped to [B, L, 2, 4] as tf2onnx writes `ops.reshape(x, (batch, length, 2, 4))` with
    batch, length = ops.shape(x)[0], ops.shape(x)[1] (`first`, `second`: the axes those two read)."""
    node = helper.make_node
    constants = [numpy_helper.from_array(np.array([value], "int64"), name)
                 for name, value in (("a0", first), ("a1", first + 1), ("b0", second), ("b1", second + 1),
                                     ("zero", 0))]
    constants.append(numpy_helper.from_array(np.array([2, 4], "int32"), "heads"))
    nodes = [node("Shape", [shape_of], ["shape"]), node("Cast", ["shape"], ["shape32"], to=TensorProto.INT32),
             node("Slice", ["shape32", "a0", "a1", "zero"], ["batch"]),
             node("Slice", ["shape32", "b0", "b1", "zero"], ["length"]),
             node("Concat", ["batch", "length", "heads"], ["target32"], axis=0),
             node("Cast", ["target32"], ["target"], to=TensorProto.INT64),
             node("Reshape", ["x", "target"], ["y"], **({"allowzero": 1} if allowzero else {}))]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", "length", 8])
              for name in dict.fromkeys(["x", shape_of])]
    graph = helper.make_graph(nodes, "heads", inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["batch", "length", 2, 4])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_reshape_that_keeps_its_inputs_leading_dimensions_gets_a_constant_shape():
    model = _head_split()
    assert fuse_reshape_shapes(model) == 1
    onnx.checker.check_model(model)
    assert [node.op_type for node in model.graph.node] == ["Reshape"]
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [0, 0, 2, 4]
    for shape in ((3, 5, 8), (1, 1, 8)):  # both leading axes still dynamic
        x = np.random.default_rng(6).normal(size=shape).astype("float32")
        np.testing.assert_array_equal(_run_all(model, x)[0], x.reshape(*shape[:2], 2, 4))


@pytest.mark.parametrize("case", ["axes swapped", "another tensor's shape", "allowzero"])
def test_a_reshape_to_other_dimensions_keeps_its_computed_shape(case):
    model = {"axes swapped": lambda: _head_split(first=1, second=0),
             "another tensor's shape": lambda: _head_split(shape_of="other"),
             "allowzero": lambda: _head_split(allowzero=1)}[case]()
    kinds = [node.op_type for node in model.graph.node]
    assert fuse_reshape_shapes(model) == 0
    assert [node.op_type for node in model.graph.node] == kinds
