"""keras_bertology/export/onnx_fusion.py: tf2onnx's written-out layer norm made one LayerNormalization, only where
nothing else reads the values it removes (the exports' own files: tests/export/test_onnx.py)."""

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from keras_bertology.export.onnx_fusion import fuse_layer_norms

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
