"""`bertology export --format onnx`: a run's encoder, or a fine-tuned task model, as an ONNX model on token
ids, for ONNX Runtime (C++, C#, Java, JavaScript, mobile), with no TensorFlow where it serves.

`model.onnx` takes one int32 tensor per encoder input, named as the SavedModel's `serve_ids` names them
(token_ids, segment_ids, padding_mask, ...; [batch, length], ELMo's [batch, length, 50]), both axes dynamic
(no padding to the run's length), and gives the encoder's outputs (a task model's logits) in float32. ONNX
has no assert: the checks `serve_ids` makes in its graph (at most the run's length, ids in range) are written
to `onnx.json` for the client to make, with the opset and the versions of the tools that made the file.

With `quantize="int8"` the export also writes `model.int8.onnx`: ONNX Runtime's dynamic quantization, its
matrix weights stored in int8 and the activations quantized per call (a quarter of the float weights' size;
faster where the processor has int8 dot products). It is checked to run, and its largest difference from
the float model on the check inputs is recorded; benchmarks/onnx_int8_accuracy.py measures what it costs in
fine-tuned accuracy.
"""

import contextlib
import importlib.util
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_bertology import __version__
from keras_bertology.atomic import atomic_directory
from keras_bertology.errors import ConfigError, NotExpressible
from keras_bertology.export import onnx_text
from keras_bertology.export.saved_model import MAX_WORD_CHARS

OPSET = 17  # ONNX Runtime 1.14 and later run it (the C#, Java and JavaScript packages of 2023 on)
MODEL_FILE = "model.onnx"
QUANTIZED_FILE = "model.int8.onnx"
QUANTIZATIONS = ("int8",)
DESCRIPTION_FILE = "onnx.json"
NEEDS_EXTRA = "--format onnx needs the onnx extra: pip install 'keras-bertology[onnx]'"
# The export runs its model once in ONNX Runtime against the run's encoder: a converter's mistake stops it.
CHECK_TOLERANCE = 1e-4
CHECK_SHAPE = (2, 8)  # batch, length (at most the run's); the second row half padding


def _converter():
    """tf2onnx's converter and the versions it records, or one line naming the extra when it is missing."""
    try:
        import onnx
        import tf2onnx
        from tf2onnx import convert
    except ImportError:
        raise ConfigError(NEEDS_EXTRA) from None
    # Looked up, not imported: the string model's tokenizers run in a process of their own, and the package's
    # `__init__` imports transformers where that is installed (seconds).
    if importlib.util.find_spec("onnxruntime_extensions") is None:
        raise ConfigError(NEEDS_EXTRA)
    return convert, {"tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__, "tensorflow": tf.__version__}


def _erfc(ctx, node, name, args):
    """Keras's exact GELU computes erfc, which tf2onnx (1.17) cannot convert: erfc(x) = 1 - erf(x)."""
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype)).output[0]
    node.type = "Erf"
    ctx.insert_new_node_on_output("Sub", node.output[0], inputs=[one, node.output[0]],
                                  name=utils.make_name(f"{name}_one_minus"))


@contextlib.contextmanager
def _quiet_conversion():
    """tf2onnx converting, quietly (what it cannot convert is reported by `_unconverted`), with its graph
    optimizers less the reshape optimizer, which rewires the shape a head split reads (`ops.shape(x)[:2]`
    of a Dense output without bias) to the 2-D matrix under it: T5, DeBERTa, ModernBERT, XLNet and
    Transformer-XL then fail in ONNX Runtime ("cannot reshape {32,128} to {32,128,4,32}"). tf2onnx's
    from_function takes no optimizer list, so the table it reads is swapped."""
    from tf2onnx import optimizer

    every = optimizer._get_optimizers
    # TensorFlow's logger too: serializing the graph for tf2onnx's optimizers warns, in three lines on every
    # export, that the lookup tables' initializers cannot be kept in a MetaGraph collection (they are not read).
    logs = [logging.getLogger(name) for name in ("tf2onnx", "tensorflow")]
    levels = [log.level for log in logs]
    optimizer._get_optimizers = lambda: {name: step for name, step in every().items() if name != "reshape_optimizer"}
    for log in logs:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        optimizer._get_optimizers = every
        for log, level in zip(logs, levels):
            log.setLevel(level)


def _unconverted(model):
    """The operation types of `model` (its subgraphs too) that ONNX does not define: what tf2onnx left as
    TensorFlow's."""
    import onnx

    def nodes(graph):
        for node in graph.node:
            yield node
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    yield from nodes(attribute.g)

    return sorted({node.op_type for node in nodes(model.graph) if not onnx.defs.has(node.op_type, node.domain)})


def _check_inputs(specs, limits, seq_len, seed=0):
    """{name: int32 array} of CHECK_SHAPE (length at most `seq_len`): ids drawn within each input's limit, the
    second row's padding mask half zeros."""
    rng = np.random.default_rng(seed)
    batch, length = CHECK_SHAPE[0], min(CHECK_SHAPE[1], seq_len)
    inputs = {}
    for spec in specs:
        shape = (batch, length, *spec.shape[2:])
        if spec.name == "padding_mask":
            inputs[spec.name] = np.ones(shape, "int32")
            inputs[spec.name][1, (length + 1) // 2:] = 0
        else:
            inputs[spec.name] = rng.integers(0, limits.get(spec.name, 2), shape).astype("int32")
    return inputs


def _self_check(model, traced, inputs, which="converted"):
    """The largest difference between ONNX Runtime's outputs of `model` (serialized bytes) and `traced`'s on
    `inputs`."""
    import onnxruntime

    expected = {name: value.numpy() for name, value in traced(*inputs.values()).items()}
    try:
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        got = dict(zip([output.name for output in session.get_outputs()], session.run(None, inputs)))
    except Exception as error:  # onnxruntime's own error types (Fail, InvalidGraph, ...): the converted model is wrong
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"ONNX Runtime cannot run the {which} model ({message[:300]}); export it as a "
                          "SavedModel") from None
    return max(float(np.abs(got[name] - value).max()) for name, value in expected.items())


def _quantized(float_path, staging):
    """The bytes of `float_path`'s model with int8 weights (dynamic quantization), made in `staging`."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = staging / QUANTIZED_FILE
    logger = logging.getLogger()  # quantize_dynamic logs its advice (pre-processing) on the root logger
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        quantize_dynamic(float_path, quantized, weight_type=QuantType.QInt8)
    finally:
        logger.setLevel(level)
    return quantized.read_bytes()


def export_onnx(run, out_dir, quantize=None):
    """Write `run`'s (a `runs.RunModel`) text encoder as `out_dir`/model.onnx and its description, atomically,
    with `quantize` (one of QUANTIZATIONS) also its quantized model, and where its tokenizer and layout can
    be written as ONNX operators the string model (`onnx_text`); returns the description."""
    from keras_bertology.models.registry import get_family

    encoder = _in_float32(run.backbone).text_encoder()  # an encoder-decoder's encoder: what a text alone feeds
    family = get_family(run.family)
    text = PackedText(family, run.tokenizer) if run.tokenizer is not None else \
        "the run has no tokenizer to write into it"
    # Where the SavedModel has `serve_pairs` (the family reads segments), a string model of text pairs too.
    pairs = PackedText(family, run.tokenizer, pairs=True) \
        if run.tokenizer is not None and "segment_ids" in encoder.input else None
    return export_model_onnx(encoder, run.backbone.input_limits(), run.seq_len, out_dir,
                             {"family": run.family, "preset": run.preset}, f"{run.family}'s encoder", quantize, text,
                             pairs)


def _in_float32(backbone):
    """`backbone` itself, or where any of its layers computes in another precision (a run trained in
    mixed_bfloat16) a copy computing in float32 with the same weights: tf2onnx writes such a graph's casts
    with float16 on one side and bfloat16 on the other, which ONNX Runtime refuses, and its CPU kernels have
    no bfloat16 products to gain from."""
    if all(layer.dtype_policy.name == "float32" for layer in backbone._flatten_layers()):
        return backbone
    copy = type(backbone).from_config({**backbone.get_config(), "dtype": "float32"})
    copy.set_weights(backbone.get_weights())
    return copy


def export_model_onnx(model, limits, seq_len, out_dir, details, what, quantize=None, text=None, pairs_text=None):
    """`model` (Keras, a dict of [B, L, ...] int inputs) converted, checked and written, with `quantize` its
    quantized model too, with `text` (a string model form, or why there is none) its string model where
    it has one, and with `pairs_text` (a form of text pairs) the string model of an encoder's pairs beside
    it; `what` names it in errors."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ConfigError(f"--quantize takes {', '.join(QUANTIZATIONS)} (got {quantize!r})")
    convert, versions = _converter()
    names = list(model.input)
    specs = [tf.TensorSpec([None, None, *model.input[name].shape[2:]], tf.int32, name=name) for name in names]

    def call(*inputs):
        outputs = model(dict(zip(names, inputs)), training=False)
        outputs = outputs if isinstance(outputs, dict) else {"logits": outputs}
        return {name: tf.cast(value, tf.float32) for name, value in outputs.items()}

    traced = tf.function(call, input_signature=specs, autograph=False)
    description = {
        "bertology_version": __version__, **details, "model": MODEL_FILE,
        "inputs": [{"name": name, "dtype": "int32", "shape": ["batch", "length", *spec.shape[2:]],
                    **({"below": int(limits[name])} if name in limits else {})} for name, spec in zip(names, specs)],
        "max_length": seq_len, "outputs": sorted(traced.get_concrete_function().structured_outputs),
        "opset": OPSET, "versions": versions,
    }
    with _quiet_conversion():
        converted, _ = convert.from_function(traced, input_signature=specs, opset=OPSET,
                                             custom_op_handlers={"Erfc": (_erfc, [])})
    unconverted = _unconverted(converted)
    if unconverted:
        raise ConfigError(f"{what} has operations ONNX cannot express ({', '.join(unconverted)}); "
                          "export it as a SavedModel")
    from keras_bertology.export import onnx_fusion  # onnx is there: _converter checked

    description["fused"] = {"LayerNormalization": onnx_fusion.fuse_layer_norms(converted),
                            "Gelu": onnx_fusion.fuse_gelus(converted), "MatMul": onnx_fusion.fuse_tensordots(converted),
                            "Reshape": onnx_fusion.fuse_reshape_shapes(converted)}
    check_inputs = _check_inputs(specs, limits, seq_len)
    gap = _self_check(converted.SerializeToString(), traced, check_inputs)
    if not gap <= CHECK_TOLERANCE:
        raise ConfigError(f"the ONNX model of {what} computes otherwise than the Keras model (outputs {gap:.2g} "
                          f"apart, more than {CHECK_TOLERANCE:g}); export it as a SavedModel")
    description["self_check"] = {"shape": list(CHECK_SHAPE), "max_difference": gap}
    string_models = {}
    for key, file, form in (("text_model", onnx_text.TEXT_MODEL_FILE, text),
                            ("text_pairs_model", onnx_text.TEXT_PAIRS_MODEL_FILE, pairs_text)):
        if form is not None:
            string_models[file], description[key] = (None, {"missing": form}) if isinstance(form, str) else \
                _string_model(converted, form, seq_len, traced, names, what, file)
    with atomic_directory(out_dir) as staging:
        (staging / MODEL_FILE).write_bytes(converted.SerializeToString())
        for file, string_model in string_models.items():
            if string_model is not None:
                (staging / file).write_bytes(string_model)
        if quantize:
            # No bound: int8 weights move the outputs by far more than a converter's error; the accuracy they
            # cost is measured on fine-tuning test sets (benchmarks/onnx_int8_accuracy.py), not here.
            quantized_gap = _self_check(_quantized(staging / MODEL_FILE, staging), traced, check_inputs, "quantized")
            if not np.isfinite(quantized_gap):
                raise ConfigError(f"the int8 model of {what} gives outputs that are not finite; export it unquantized")
            description["quantized"] = {"model": QUANTIZED_FILE, "weights": quantize,
                                        "method": "onnxruntime.quantization.quantize_dynamic",
                                        "max_difference": quantized_gap}
        (staging / DESCRIPTION_FILE).write_text(json.dumps(description, indent=2))
    return description


def _string_model(ids_model, text, seq_len, traced, names, what, file):
    """(the bytes of the string model on `ids_model`, its entry in onnx.json as `file`), or (None, the entry
    saying why there is none): built by the form `text` (`PackedText`; `finetune.onnx_export`'s `TaggedWords`,
    `AnsweredQuestions`), then run in a process without TensorFlow on the form's check batches against the
    SavedModel's own computation (`traced` is the model's): the same ids (and words, tags, answers), and outputs
    within CHECK_TOLERANCE."""
    try:
        model = text.build(ids_model, seq_len)
    except NotExpressible as why:
        return None, {"missing": str(why)}
    batches = text.batches(seq_len)
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / onnx_text.TEXT_MODEL_FILE
        path.write_bytes(model.SerializeToString())
        results = onnx_text.run_without_tensorflow(path, batches, work)
    gap = 0.0
    for batch, got in zip(batches, results):
        expected = text.expected(traced, names, seq_len, batch)
        unchecked = sorted(set(got) - set(expected))
        if unchecked:  # a form's mistake: every output the string model gives is checked
            raise ValueError(f"the check of {file} has nothing to compare its outputs {', '.join(unchecked)} with")
        rows = list(zip(*batch.values())) if len(batch) > 1 else next(iter(batch.values()))
        exact = {name: value for name, value in expected.items() if value.dtype.kind not in "f"}
        differing = [rows[row] for row in range(len(rows))
                     if any(got[name].shape != value.shape or not np.array_equal(_as_text(got[name][row]),
                                                                                 _as_text(value[row]))
                            for name, value in exact.items())]
        if differing:
            first = tuple(text[:40] for text in differing[0]) if len(batch) > 1 else differing[0][:40]
            return None, {"missing": f"its ONNX tokenizer reads {len(differing)} of {len(rows)} check texts "
                                     f"otherwise than the SavedModel (first {first!r})"}
        gap = max(gap, *(float(np.abs(got[name] - value).max(initial=0.0)) for name, value in expected.items()
                         if name not in exact))
    if not gap <= CHECK_TOLERANCE:
        raise ConfigError(f"the ONNX string model of {what} computes otherwise than the Keras model (outputs "
                          f"{gap:.2g} apart, more than {CHECK_TOLERANCE:g}); use the SavedModel")
    inputs = list(batches[0])
    return model.SerializeToString(), {
        "model": file, **({"input": inputs[0]} if len(inputs) == 1 else {}), "inputs": inputs,
        "dtype": "string", "shape": ["batch"], "outputs": sorted(output.name for output in model.graph.output),
        "needs": "onnxruntime-extensions (register its library with the session's options)",
        **({"unreadable": f"{text.tokenizer.onnx_unreadable_texts} fail the batch in ONNX Runtime (node "
                          f"{onnx_text.REFUSAL_NODE}), where the SavedModel reads them as their bytes"}
           if text.tokenizer.onnx_unreadable_texts else {}),
        "self_check": {"texts": sum(len(batch[inputs[0]]) for batch in batches), "max_difference": gap}}


def _as_text(value):
    """`value` with strings as bytes (ONNX Runtime gives str, TensorFlow bytes), to compare."""
    value = np.asarray(value)
    return np.vectorize(lambda item: item.encode() if isinstance(item, str) else item, otypes=[object])(value) \
        if value.dtype.kind in "OUS" else value


def check_batches(columns):
    """The check batches of a string model of one input per column ({input: texts}): the texts, those with no
    word long enough to be cut (the graph skips the cut there), then no token at all and no text at all."""
    short = {name: [] for name in columns}
    for row in zip(*columns.values()):
        if max(map(len, row)) <= MAX_WORD_CHARS:
            for name, text in zip(columns, row):
                short[name].append(text)
    return [columns, short, {name: [b"", b" "] for name in columns}, {name: [b"", b""] for name in columns}]


class PackedText:
    """The string model of an encoder, or of a classifier of one text or of text pairs: the texts packed as the
    family packs them (`onnx_text.front_end`), the model's outputs and the laid-out ids out."""

    def __init__(self, family, tokenizer, pairs=False):
        self.family, self.tokenizer, self.pairs = family, tokenizer, pairs
        self.inputs = onnx_text.text_inputs(pairs)

    def build(self, ids_model, seq_len):
        template = onnx_text.text_layout(self.family, self.tokenizer, self.pairs)
        return onnx_text.text_model(ids_model, self.tokenizer, template, seq_len, self.inputs)

    def batches(self, seq_len):
        checks = onnx_text.check_pairs(self.tokenizer, seq_len) if self.pairs else \
            (onnx_text.check_texts(self.tokenizer, seq_len),)
        return check_batches(dict(zip(self.inputs, checks)))

    def expected(self, traced, names, seq_len, batch):
        packed = onnx_text.expected_front_end(self.family, self.tokenizer, seq_len, *batch.values())
        outputs = traced(*[tf.constant(packed[name]) for name in names])
        return packed | {name: value.numpy() for name, value in outputs.items()}
