"""The checks every model family passes, each a function of a family (a `ModelFamily` of the registry or a
plug-in's), so that tests/models/test_family_harness.py runs them on every registered family and a plug-in's test
on its own.

`family_case` builds what the checks share once per family: the smallest preset at one layer with a
vocabulary learned here, weights moved off their initial values (a weight loaded into the wrong place
shows), written as a run folder as pretraining writes it, and one batch of the family's own pretraining
data. `check_in_a_fresh_process` takes every family's case at once: one new process, one TensorFlow
start-up, for all of them (tests/support/family_harness_driver.py).
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from counting import shapes_only
from keras_bertology.runs import RunModel, save_run_model
from forked_python import run_python

SEQ_LEN = 16
BATCH_SIZE = 2
VOCAB_SIZE = 300
TEXTS = ["Now is the winter of our discontent.", "To be, or not to be?", ""]
DRIVER = Path(__file__).with_name("family_harness_driver.py")
HF_TOLERANCE = 1e-5


@dataclass
class FamilyCase:
    """A family's model as the checks share it: `run` saved in `folder`, `batch` the pretrainer's inputs,
    `token_ids` what its tokenizer made of TEXTS (read before any other tokenizer is loaded: a SentencePiece
    one loaded and dropped in the same process takes the first one's resource with it)."""

    family: object
    preset: str
    run: RunModel
    folder: Path
    batch: dict
    token_ids: list
    outputs: dict = field(default_factory=dict, repr=False)  # {"backbone"/"pretrainer": outputs_of(it, batch)}

    @property
    def backbone_inputs(self):
        return {name: self.batch[name] for name in self.run.backbone.input}

    def outputs_of(self, model):
        """`outputs_of(model, self.batch)` of the run's backbone or pretrainer, computed once for all the
        checks (the models are never changed)."""
        part = "backbone" if model is self.run.backbone else "pretrainer" if model is self.run.pretrainer else None
        if part is None:
            return outputs_of(model, self.batch)
        if part not in self.outputs:
            self.outputs[part] = outputs_of(model, self.batch)
        return self.outputs[part]


def smallest_preset(family):
    """The preset with the fewest parameters."""
    return min(family.presets, key=lambda name: family.presets[name]["params"])


def sentences_of_one_play(count=600):
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    return [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:count]


def native_run(family, folder, sentences, perturb_seed=None):
    """`family`'s smallest preset at one layer, with a vocabulary learned from `sentences`, saved in `folder` as
    pretraining writes a run; with `perturb_seed` its weights moved off their initial values first, so that a
    weight loaded from the wrong place shows."""
    preset = smallest_preset(family)
    tokenizer = family.train_tokenizer(sentences, VOCAB_SIZE)
    sizes = family.sized_config({"num_layers": 1})
    backbone = family.backbone_cls(**family.backbone_config(preset, vocab_size=tokenizer.vocab_size, **sizes))
    pretrainer = family.build_pretrainer(backbone, preset=preset, batch_size=BATCH_SIZE)
    if perturb_seed is not None:
        rng = np.random.default_rng(perturb_seed)
        for variable in pretrainer.trainable_weights:
            variable.assign(variable + rng.normal(0, 0.1, variable.shape).astype(variable.dtype))
    run = RunModel(family.name, pretrainer.served_backbone(), tokenizer, SEQ_LEN, pretrainer=pretrainer, preset=preset)
    save_run_model(folder, run)
    return run


def family_case(family, folder, sentences, seed=0):
    """`native_run` with its weights perturbed, and what the checks read of it."""
    keras.utils.set_random_seed(seed)
    run = native_run(family, folder, sentences, perturb_seed=seed)
    return FamilyCase(family, run.preset, run, Path(folder), pretraining_batch(family, run.preset, run, sentences, seed),
                      run.tokenizer.tokenize(tf.constant(TEXTS)).to_list())


def pretraining_batch(family, preset, run, sentences, seed=0):
    """The pretrainer's inputs of one batch as a run of `family` makes them (its instances, its masker)."""
    from keras_bertology.data.recipe import build_masker, corpus_token_counts, tokenize_documents, unit_marker
    from keras_bertology.pretraining.held_out import eval_dataset
    from keras_bertology.pretraining.options import PretrainOptions

    options = PretrainOptions(model=family.name, preset=preset, seq_len=SEQ_LEN, batch_size=BATCH_SIZE, seed=seed,
                              dupe_factor=1, vocab_size=VOCAB_SIZE)
    documents = [sentences[start:start + 20] for start in range(0, len(sentences), 20)]
    tokenized = tokenize_documents(documents, run.tokenizer, unit_marker(family, options, documents))
    masker = build_masker(family, run.tokenizer, options,
                          token_counts=corpus_token_counts({"token_ids": np.concatenate(
                              [ids for document in tokenized for ids in document])[None]}, run.tokenizer))
    dataset, _ = eval_dataset(family, tokenized, run.tokenizer, options, masker, run.pretrainer, BATCH_SIZE, 1)
    x = next(iter(dataset))[0]
    return {name: keras.ops.convert_to_numpy(value) for name, value in x.items()}


def outputs_of(model, inputs):
    """{output name: NumPy array} of `model` on `inputs` (the names it takes among them), in inference; an
    output that a second call gives otherwise is a random draw (ELECTRA's sampled replacements), which no
    other model can repeat: it is None, and `_assert_same` checks only that both models have it."""
    taken = {name: inputs[name] for name in model.input}
    once, twice = ({name: keras.ops.convert_to_numpy(value) for name, value in model(taken, training=False).items()}
                   for _ in range(2))
    return {name: value if np.array_equal(value, twice[name]) else None for name, value in once.items()}


def check_parameter_count(family):
    """The smallest preset as its config says has the parameters its record says: its backbone's, or where
    the record counts the original's trainable weights with its own output layer (Transformer-XL's softmax),
    the pretrainer's trainable ones."""
    preset = smallest_preset(family)
    expected = family.presets[preset]["params"]
    with shapes_only():
        backbone = family.backbone_cls(**family.backbone_config(preset))
        counts = [backbone.count_params()]
        if counts[0] != expected:
            pretrainer = family.build_pretrainer(backbone, preset=preset, batch_size=1)
            counts.append(sum(int(np.prod(variable.shape)) for variable in pretrainer.trainable_weights))
    assert expected in counts, (preset, expected, counts)


def check_keras_round_trip(case, folder):
    """The backbone and the pretrainer saved as `.keras` and loaded by Keras alone: the same class, config,
    weights (a tied table stays one) and outputs, bit for bit. The archives are those `save_run_model` wrote
    of these very models with `model.save` (`family_case`); where the case's folder lacks one, it is saved
    in `folder`."""
    for part, model in (("backbone", case.run.backbone), ("pretrainer", case.run.pretrainer)):
        path = case.folder / "model" / f"{part}.keras"
        if not path.is_file():
            path = Path(folder) / f"{model.name}.keras"
            model.save(path)
        loaded = keras.saving.load_model(path, compile=False)
        assert type(loaded) is type(model)
        assert loaded.get_config() == model.get_config()
        assert [v.path for v in loaded.weights] == [v.path for v in model.weights]
        _assert_same(outputs_of(loaded, case.batch), case.outputs_of(model), 0, type(model).__name__)


def check_mixed_precision(case):
    """Built under mixed_bfloat16, the backbone computes in bfloat16 and every output of it and of the
    pretrainer is finite."""
    from keras_bertology.engine.precision import dtype_policy_scope

    config = {key: value for key, value in case.run.backbone.get_config().items() if key != "dtype"}
    with dtype_policy_scope("mixed_bfloat16"):
        backbone = type(case.run.backbone).from_config(config)
        pretrainer = case.family.build_pretrainer(backbone, preset=case.preset, batch_size=BATCH_SIZE)
    for name, value in backbone(case.backbone_inputs, training=False).items():
        assert keras.backend.standardize_dtype(value.dtype) == "bfloat16", (name, value.dtype)
    for model in (backbone, pretrainer):
        for name, value in outputs_of(model, case.batch).items():
            assert value is None or np.isfinite(value.astype("float32")).all(), name


def check_hidden_states(case):
    """`hidden_states` gives what the first layer reads and then each layer's output, [B, L, H] each: one
    state a layer (a stack that reuses one block too), each layer changing it (tests/probing checks the
    states of BERT's blocks one by one)."""
    backbone = case.run.backbone
    encoder = backbone.text_encoder()
    inputs = {name: case.batch[name] for name in encoder.input}
    states = [keras.ops.convert_to_numpy(state) for state in backbone.hidden_states(inputs)]
    rows, length = inputs["padding_mask"].shape
    assert len(states) == backbone.get_config()["num_layers"] + 1
    assert all(state.shape == (rows, length, backbone.hidden_size) and np.isfinite(state).all() for state in states)
    assert all(not np.allclose(before, after) for before, after in zip(states, states[1:]))


def check_from_preset(case):
    """`Backbone`, `Pretrainer` and `Tokenizer.from_preset` of the run folder give the run's model back."""
    from keras_bertology.models import Backbone, Pretrainer
    from keras_bertology.tokenizers.base import Tokenizer

    for base, model in ((Backbone, case.run.backbone), (Pretrainer, case.run.pretrainer)):
        loaded = base.from_preset(str(case.folder))
        assert type(loaded) is type(model)
        _assert_same(outputs_of(loaded, case.batch), case.outputs_of(model), 0, base.__name__)
    one_line = Tokenizer.from_preset(str(case.folder)).tokenize(tf.constant(TEXTS)).to_list()  # held by nothing
    assert one_line == case.token_ids


def check_hf_round_trip(case, folder):
    """Where transformers has the family's model: the run exported as a transformers folder and converted
    back computes what the run does, within HF_TOLERANCE, and tokenizes alike."""
    from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
    from keras_bertology.convert.hf_export import export_hf

    if case.family.conversion.hf_exporter_path is None:
        return False
    export_hf(case.folder, Path(folder) / "hf")
    converted, _ = convert_hf_checkpoint(Path(folder) / "hf", seq_len=SEQ_LEN)
    got, expected = outputs_of(converted.backbone, case.batch), case.outputs_of(case.run.backbone)
    # The transformers class may have no place for an output (BigBird's masked LM has no pooler).
    assert got and set(got) <= set(expected), (sorted(got), sorted(expected))
    _assert_same(got, {name: expected[name] for name in got}, HF_TOLERANCE, "backbone")
    assert converted.tokenizer.tokenize(tf.constant(TEXTS)).to_list() == case.token_ids
    return True


# Run in a process that imports onnxruntime and NumPy only: what a server without TensorFlow runs.
ONNX_SERVER = """
import sys
import numpy as np
import onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
inputs = dict(np.load(sys.argv[2]))
names = [output.name for output in session.get_outputs()]
outputs = {}
for rows, length in ((None, None), (1, 5)):  # the whole batch, then one shorter row: both axes dynamic
    feed = {item.name: inputs[item.name][:rows, :length] for item in session.get_inputs()}
    outputs.update({f"{rows}/{name}": value for name, value in zip(names, session.run(None, feed))})
assert "tensorflow" not in sys.modules and "keras" not in sys.modules
np.savez(sys.argv[3], **outputs)
"""
ONNX_TOLERANCE = 1e-4


def check_onnx(case, folder, string_model=True):
    """The run exported with `--format onnx` computes its encoder's outputs within ONNX_TOLERANCE in a process
    with ONNX Runtime and no TensorFlow, on the whole batch and on a shorter one; onnx.json says its inputs,
    their limits and the run's length. With `string_model` False the run is exported without its tokenizer:
    the encoder alone, for a family whose string model a test of its own checks (its build and self-check cost
    seconds a family)."""
    from keras_bertology.export.onnx import export_onnx

    folder = Path(folder)
    description = export_onnx(case.run if string_model else replace(case.run, tokenizer=None), folder / "onnx")
    encoder = case.run.backbone.text_encoder()
    limits = case.run.backbone.input_limits()
    assert [spec["name"] for spec in description["inputs"]] == list(encoder.input)
    assert all(spec.get("below") == limits.get(spec["name"]) for spec in description["inputs"])
    assert description["max_length"] == case.run.seq_len == SEQ_LEN
    if string_model:
        # The string model (tests/export/test_onnx_text.py) where the tokenizer and layout have ONNX operators,
        # checked at export against the SavedModel's front end; else one line saying why not.
        # An encoder that reads segments has the pairs' string model beside it, as the SavedModel has
        # `serve_pairs`.
        assert ("text_pairs_model" in description) == ("segment_ids" in encoder.input)
        for text in (description[key] for key in ("text_model", "text_pairs_model") if key in description):
            assert (text["self_check"]["max_difference"] <= ONNX_TOLERANCE
                    and (folder / "onnx" / text["model"]).is_file()) \
                if "model" in text else (text["missing"].strip() and "\n" not in text["missing"])
    else:
        assert "text_pairs_model" not in description and "model" not in description["text_model"]
        assert sorted(path.name for path in (folder / "onnx").iterdir()) == ["model.onnx", "onnx.json"]
    inputs = {name: case.batch[name].astype("int32") for name in encoder.input}
    np.savez(folder / "inputs.npz", **inputs)
    done = subprocess.run([sys.executable, "-c", ONNX_SERVER, str(folder / "onnx" / "model.onnx"),
                           str(folder / "inputs.npz"), str(folder / "outputs.npz")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = dict(np.load(folder / "outputs.npz"))
    shorter = {name: value[:1, :5] for name, value in inputs.items()}
    for rows, batch in ((None, inputs), (1, shorter)):
        expected = outputs_of(encoder, batch)
        assert sorted(description["outputs"]) == sorted(expected)
        _assert_same({name: got[f"{rows}/{name}"] for name in expected}, expected, ONNX_TOLERANCE, f"onnx {rows}")


def check_in_a_fresh_process(cases, folder, plugins=(), exported=None):
    """Every case in ONE new process: its run folder's `.keras` archives loaded as the library loads them
    compute what the case's models do, bit for bit; the cases of `exported` (all by default) export as a
    SavedModel, whose `serve` (strings) and `serve_ids` (the ids `serve` packed) agree. `plugins`:
    "module:function"s the process calls first, which register a plug-in's families (a plug-in's user
    imports it so). {family: {"ok", "signatures" (of the export), "seconds"}}."""
    exported = {case.family.name for case in (cases if exported is None else exported)}
    folder = Path(folder)
    entries = []
    for case in cases:
        expected = folder / f"{case.family.name}-expected.npz"
        outputs = {part: case.outputs_of(model) for part, model in (("backbone", case.run.backbone),
                                                                    ("pretrainer", case.run.pretrainer))}
        np.savez(expected, **{f"input/{k}": v for k, v in case.batch.items()},
                 **{f"{part}/{k}": v for part, values in outputs.items() for k, v in values.items() if v is not None})
        entries.append({"family": case.family.name, "run": str(case.folder), "expected": str(expected),
                        "export": str(folder / f"{case.family.name}-export") if case.family.name in exported else None,
                        "texts": TEXTS})
    cases_file, results_file = folder / "cases.json", folder / "results.json"
    # Where each plug-in's module lies, for the new process to find it as this one did.
    paths = sorted({str(Path(sys.modules[plugin.partition(":")[0]].__file__).parent) for plugin in plugins})
    cases_file.write_text(json.dumps({"plugins": list(plugins), "paths": paths, "cases": entries}))
    done = run_python([sys.executable, str(DRIVER), str(cases_file), str(results_file)], timeout=3000,
                      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(results_file.read_text())
    assert sorted(results) == sorted(case.family.name for case in cases)
    failed = [f"{name}: {result['error']}\n{result['trace']}" for name, result in results.items() if not result["ok"]]
    assert not failed, "\n".join(failed)
    return results


def _assert_same(got, expected, tolerance, what):
    assert sorted(got) == sorted(expected), (what, sorted(got), sorted(expected))
    for name, value in expected.items():
        if value is None or got[name] is None:
            continue  # a random draw (two draws of 0/1 labels can agree by chance)
        np.testing.assert_allclose(got[name], value, rtol=0, atol=tolerance, err_msg=f"{what} {name}")


def one_per_serving_path(cases):
    """(the first case of each way of serving, the rest): a way is the output kinds the pretrainer declares,
    the backbone's `served_outputs` and the family's packers, which are all that an export runs of a family."""
    seen, first, rest = set(), [], []
    for case in cases:
        key = (tuple(case.run.pretrainer.output_kinds), type(case.run.backbone).served_outputs,
               case.family.inputs.text_packer_path, case.family.inputs.segment_packer_path)
        (rest if key in seen else first).append(case)
        seen.add(key)
    return first, rest
