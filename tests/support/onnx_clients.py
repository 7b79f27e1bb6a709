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
