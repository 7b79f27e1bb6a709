"""ONNX Runtime clients for tests: a model run on texts in a new process that never imports TensorFlow (in a
process that did, the extensions' regular expressions silently match nothing), as a user's client runs it."""

import subprocess
import sys

import numpy as np

from keras_bertology.export.onnx_text import REFUSAL_NODE, RUNNER

# A client as docs/serving.md shows one: ONNX Runtime with the extensions' library, no TensorFlow. Its session is
# onnx_text_run.py's, read by path (importing the package would import TensorFlow), which finds the library
# without importing onnxruntime_extensions (whose import of transformers costs each client seconds).
CLIENT = """
import importlib.util, sys
import numpy as np
spec = importlib.util.spec_from_file_location("onnx_text_run", RUNNER_PATH)
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
session = runner.session(sys.argv[1])
feed = {"text": np.load(sys.argv[2])["texts"]}
names = [output.name for output in session.get_outputs()]
outputs = dict(zip(names, session.run(None, feed)))
# Strings come back as Python str: saved as UTF-8 bytes.
outputs = {name: np.array([item.encode() for item in value.reshape(-1)], dtype=object).astype(bytes).reshape(
    value.shape) if value.dtype == object else value for name, value in outputs.items()}
assert "tensorflow" not in sys.modules and "keras" not in sys.modules
np.savez(sys.argv[3], **outputs)
""".replace("RUNNER_PATH", repr(str(RUNNER)))

# Text pairs: the arrays first and second, fed as the pair model's two inputs.
PAIRS_CLIENT = CLIENT.replace('feed = {"text": np.load(sys.argv[2])["texts"]}', 'columns = np.load(sys.argv[2])\n'
                              'feed = {"text": columns["first"], "text_b": columns["second"]}')
# Questions and contexts: the arrays first and second, fed as the answer model's two inputs.
ANSWERS_CLIENT = PAIRS_CLIENT.replace('"text": columns["first"], "text_b"', '"question": columns["first"], "context"')


def refusals(client):
    """`client` feeding each row (a text, a pair) alone, then beside rows of plain ASCII text (a batch of ASCII
    skips a byte-level tokenizer's UTF-8 check), saving whether ONNX Runtime refused it both times (an error
    naming the refusing node, not other ids)."""
    return client.split("names =")[0] + """
def refuses(batch):
    try:
        session.run(None, batch)
        return False
    except Exception as error:  # the node that refuses it, named
        return sys.argv[4] in str(error)

plain = lambda text: np.array([text])
refused = [refuses({name: column[row:row + 1] for name, column in feed.items()})
           and refuses({name: np.concatenate([plain(b"plain words"), column[row:row + 1], plain(b"more")])
                        for name, column in feed.items()})
           for row in range(len(next(iter(feed.values()))))]
np.savez(sys.argv[3], refused=np.array(refused))
"""


REFUSALS_CLIENT = refusals(CLIENT)  # each text alone


def served_by_onnx(model_path, texts, folder, client=CLIENT):
    """The outputs of the ONNX model at `model_path` on `texts` (bytes or str), by `client` in a new process."""
    if "columns" in client:  # texts: [first texts, second texts]
        np.savez(folder / "texts.npz", **{name: _bytes(column) for name, column in zip(("first", "second"), texts)})
    else:
        np.savez(folder / "texts.npz", texts=_bytes(texts))
    done = subprocess.run([sys.executable, "-c", client, str(model_path), str(folder / "texts.npz"),
                           str(folder / "served.npz"), REFUSAL_NODE], cwd=folder, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(folder / "served.npz"))


def _bytes(texts):
    """Texts as a NumPy bytes array one byte wider than the longest (how invalid UTF-8 reaches the graph)."""
    return np.array(texts, dtype=f"S{max(map(len, texts)) + 1}")


def check_task_models_onnx(exports, folder, tolerance=1e-4):
    """Each fine-tuned task model's model.onnx ({name: (its fine-tuning folder, its ONNX folder)}), in a process
    without TensorFlow, gives the Keras model's logits (an answer model's start and end logits) within `tolerance`
    on a batch and on a shorter one; its onnx.json gives the task's kind, its labels in the order of the logits
    (those of results.json) and the fine-tuning's length (32). `folder` holds the inputs and outputs."""
    import json

    import keras

    from family_harness import ONNX_SERVER
    from keras_bertology.keras_archives import load_keras_archive

    models, jobs = {}, []
    for name, (tuned, out) in exports.items():
        description = json.loads((out / "onnx.json").read_text())
        results = json.loads((tuned / "results.json").read_text())
        assert (description["kind"], description["labels"], description["max_length"]) == (
            results["kind"], results["labels"], 32), name
        model = load_keras_archive(tuned / "model.keras")
        rng = np.random.default_rng(0)
        inputs = {key: rng.integers(0, model.backbone.input_limits().get(key, 2), (3, 12)).astype("int32")
                  for key in model.input}
        inputs["padding_mask"][:] = 1
        inputs["padding_mask"][2, 7:] = 0
        np.savez(folder / f"ids-{name}.npz", **inputs)
        models[name] = model, inputs, description
        jobs.append([str(out / "model.onnx"), str(folder / f"ids-{name}.npz"), str(folder / f"logits-{name}.npz")])
    # family_harness's server once per model, in one process (each new one costs seconds to start).
    script = f"import sys\nfor sys.argv[1:] in {jobs!r}:\n    exec({ONNX_SERVER!r}, {{}})\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for name, (model, inputs, description) in models.items():
        got = dict(np.load(folder / f"logits-{name}.npz"))
        for rows, batch in ((None, inputs), (1, {key: value[:1, :5] for key, value in inputs.items()})):
            expected = model(batch, training=False)
            expected = expected if isinstance(expected, dict) else {"logits": expected}
            assert sorted(expected) == description["outputs"], name
            for output, value in expected.items():
                np.testing.assert_allclose(got[f"{rows}/{output}"], keras.ops.convert_to_numpy(value), atol=tolerance,
                                           err_msg=f"{name} {output} {rows}")
