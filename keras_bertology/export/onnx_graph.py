"""A small ONNX graph builder: nodes, constants and unique names, for the graphs the export writes by hand
(the string front end of `onnx_text`), where tf2onnx has nothing to convert. It imports only `onnx`."""

import numpy as np
import onnx
from onnx import helper, numpy_helper

CONTRIB = "ai.onnx.contrib"  # ONNX Runtime Extensions' operators (tokenizers, regular expressions)


class OnnxGraph:
    """Nodes and initializers under construction, every name made here starting with `prefix` (so the graph
    merges with another without clashes). `op` returns its output's name (a list of names when `outputs` > 1)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.nodes, self.initializers = [], []
        self._count = 0

    def name(self, hint):
        self._count += 1
        return f"{self.prefix}/{hint}_{self._count}"

    def const(self, value, dtype=None):
        """An initializer holding `value` (a NumPy array, a number or a str/bytes; strings as ONNX strings)."""
        name = self.name("const")
        if isinstance(value, (str, bytes)) or (isinstance(value, np.ndarray) and value.dtype.kind in "OSU"):
            values = np.asarray(value, dtype=object)
            encoded = [item.encode() if isinstance(item, str) else bytes(item) for item in values.reshape(-1)]
            self.initializers.append(helper.make_tensor(name, onnx.TensorProto.STRING, values.shape, encoded))
        else:
            self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type, *inputs, outputs=1, domain="", output_names=None, node_name=None, **attributes):
        names = output_names or [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=node_name or self.name(op_type),
                                           domain=domain, **attributes))
        return names[0] if len(names) == 1 else names

    def only_if(self, condition, hint, compute, otherwise, element_type):
        """What `compute(branch)` adds to a graph of its own (named after `hint`) where the scalar bool
        `condition` holds, else the value `otherwise` as it is; both of `element_type` (an onnx.TensorProto
        type). An If: a costly step runs only in the batches that need it, the others skip it."""
        taken, skipped = OnnxGraph(self.name(hint)), OnnxGraph(self.name(f"{hint}_skipped"))
        return self.op("If", condition, then_branch=taken._body(compute(taken), element_type),
                       else_branch=skipped._body(skipped.op("Identity", otherwise), element_type))

    def _body(self, output, element_type):
        """This graph's nodes as an If branch giving `output` (they may read the enclosing graph's values)."""
        return helper.make_graph(self.nodes, self.prefix, [], [helper.make_tensor_value_info(output, element_type,
                                                                                             None)],
                                 self.initializers)

    def contrib(self, op_type, *inputs, outputs=1, **attributes):
        """An operator of ONNX Runtime Extensions."""
        return self.op(op_type, *inputs, outputs=outputs, domain=CONTRIB, **attributes)

    # Shorthands for the integer arithmetic a layout is.
    def scalar(self, value):
        return self.const(np.array(value, np.int64))

    def rows(self, splits):
        """[B] lengths of the rows that row splits [B + 1] bound."""
        starts = self.op("Slice", splits, self.const([0], np.int64), self.const([-1], np.int64))
        ends = self.op("Slice", splits, self.const([1], np.int64), self.const([np.iinfo(np.int64).max], np.int64))
        return starts, self.op("Sub", ends, starts)

    def equals_text(self, strings, text):
        """[N] bool: which of `strings` equal the constant `text` (the extensions' StringEqual broadcasts no
        constant onto zero strings)."""
        return self.contrib("StringEqual", strings, self.op("Expand", self.const([text]), self.op("Shape", strings)))

    def zeros(self, shape):
        """int64 zeros of the shape that the tensor `shape` holds."""
        return self.op("ConstantOfShape", shape, value=numpy_helper.from_array(np.array([0], np.int64)))

    def row_of_each(self, splits, count):
        """[count] int64: the row of each of `count` values (a [1] tensor) that row splits bound (rows may be
        empty): ones scattered at the rows' starts, summed."""
        marks = self.zeros(self.op("Add", count, self.const([1], np.int64)))
        inner = self.op("Slice", splits, self.const([1], np.int64), self.const([-1], np.int64))
        marks = self.op("ScatterElements", marks, inner, self.op("Expand", self.scalar(1), self.op("Shape", inner)),
                        reduction="add")
        return self.op("Slice", self.op("CumSum", marks, self.scalar(0)), self.const([0], np.int64), count)

    def index_in_row(self, splits, count):
        """([count] int64 rows, [count] int64 places within their rows) of `count` values (a [1] tensor) that
        row splits bound."""
        row = self.row_of_each(splits, count)
        everywhere = self.op("Range", self.scalar(0), self.op("Squeeze", count), self.scalar(1))
        return row, self.op("Sub", everywhere, self.op("Gather", splits, row))

    def next_in_row(self, values, splits, fill):
        """(each of the [N] `values`' successor, `fill` after the last; whether that successor is in the same
        row of `splits`)."""
        count, one = self.op("Shape", values), self.const([1], np.int64)

        def shifted(tensor, last):
            return self.op("Concat", self.op("Slice", tensor, one, count), self.const([last]), axis=0)

        row = self.row_of_each(splits, count)
        return shifted(values, fill), self.op("Equal", row, shifted(row, np.int64(-1)))

    def column(self, vector):
        """[B] -> [B, 1]."""
        return self.op("Unsqueeze", vector, self.const([1], np.int64))
