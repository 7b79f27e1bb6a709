"""TensorFlow Serving's warm-up file: requests it replays when it loads a SavedModel, before the first
client's, so that no client pays for the graphs' first runs (tracing of the tokenizer's ops included)."""

import inspect
from pathlib import Path

import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"


def write_warmup_requests(export_dir, endpoints, text, scalars=None):
    """Write EXPORT_DIR/assets.extra/tf_serving_warmup_requests: one request of `text` for each endpoint
    ({signature: (function, input signature)}) whose inputs are strings and scalars named in `scalars`
    ({input name: value}: fill_mask_top_k's `top_k`, ...)."""
    path = Path(export_dir) / WARMUP_FILE
    path.parent.mkdir(exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for name, (function, specs) in endpoints.items():
            values = [_example(spec, text, scalars or {}) for spec in specs]
            if any(value is None for value in values):
                continue  # pre-tokenized ids: a client's own lengths
            request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(signature_name=name))
            for input_name, value in zip(signature_input_names(function, specs), values):
                request.inputs[input_name].CopyFrom(value)
            writer.write(prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)).SerializeToString())


def signature_input_names(function, specs):
    """The names a SavedModel signature gives the inputs: each spec's name, else its argument's name."""
    arguments = list(inspect.signature(function).parameters)
    return [spec.name or argument for spec, argument in zip(specs, arguments)]


def _example(spec, text, scalars):
    if spec.dtype == tf.string and spec.shape.rank == 1:
        return tf.make_tensor_proto([text], dtype=tf.string)
    if spec.shape.rank == 0 and spec.name in scalars:
        return tf.make_tensor_proto(scalars[spec.name], dtype=spec.dtype)
    return None
