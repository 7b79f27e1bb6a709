"""Run an ONNX string model (`model.text.onnx`) on batches of texts, in a process of its own that imports only
NumPy, ONNX Runtime and ONNX Runtime Extensions: how a client serves it, and how the export checks it (in a
process that imported TensorFlow first, the extensions' regular expressions match nothing).

    python onnx_text_run.py MODEL TEXTS.npz OUTPUTS.npz

TEXTS.npz holds byte-string arrays batchI/INPUT for each of the model's string inputs; OUTPUTS.npz gets
batchI/OUTPUT for each output, and `names`, the outputs' names as JSON. Run by path, from another folder (this
one holds the package's onnx.py, which would shadow the onnx package): importing the package would import
TensorFlow.
"""

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime


def extensions_library():
    """The path of ONNX Runtime Extensions' operator library, found without importing the package: its
    `__init__` imports transformers where that is installed, 3-4 s of every client's start on 2 cores."""
    spec = importlib.util.find_spec("onnxruntime_extensions")
    if spec is None:
        raise SystemExit("the string model needs onnxruntime-extensions: pip install onnxruntime-extensions")
    folder = Path(spec.submodule_search_locations[0])
    candidates = (folder / f"_extensions_pydll{suffix}" for suffix in importlib.machinery.EXTENSION_SUFFIXES)
    found = next((path for path in candidates if path.is_file()), None)
    if found:
        return str(found)
    import onnxruntime_extensions  # a layout other than the wheel's: ask the package

    return onnxruntime_extensions.get_library_path()


def session(model_path):
    """An ONNX Runtime session of the string model, with the extensions' operators registered."""
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(extensions_library())
    return onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def main(model_path, texts_path, outputs_path):
    model = session(model_path)
    names = [output.name for output in model.get_outputs()]
    texts = np.load(texts_path)
    outputs = {"names": np.array(json.dumps(names))}
    for batch in sorted({key.split("/")[0] for key in texts.files}):
        feed = {item.name: texts[f"{batch}/{item.name}"] for item in model.get_inputs()}
        outputs.update({f"{batch}/{name}": _saveable(value) for name, value in zip(names, model.run(None, feed))})
    if "tensorflow" in sys.modules:
        raise SystemExit("TensorFlow was imported: the extensions' regular expressions would match nothing")
    np.savez(outputs_path, **outputs)


def _saveable(value):
    """`value`, its strings (which ONNX Runtime gives as str objects) as UTF-8 bytes: NumPy saves no objects."""
    if value.dtype != object:
        return value
    encoded = [item.encode() for item in value.reshape(-1)]
    return np.array(encoded, dtype=f"S{max(map(len, encoded), default=0) + 1}").reshape(value.shape)


if __name__ == "__main__":
    main(*sys.argv[1:4])
