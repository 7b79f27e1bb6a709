"""Every loading path on run folders, each case as a new process meets it: `python tests/support/fresh_process_paths.py
CASES.json RESULTS.json`.

A case is {"run": folder, "family": name, "paths": [...], "task": data folder}. Starting TensorFlow costs seconds a
process, so one process takes every case, and before each it forgets this package: its modules leave
`sys.modules` and its classes leave Keras' registry, as in a process that never imported them. What a path
then finds, it found from the archive and the library's loaders alone. `forget_the_package` checks that the
forgetting worked (a class loaded before is no longer found by its name).
"""

import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

import keras
import tensorflow as tf  # noqa: F401  (started once, before the cases)
from keras.src.saving import object_registration

PACKAGE = "keras_bertology"
TEXTS = ["Now is the winter of our discontent.", "To be, or not to be?", ""]


def forget_the_package():
    """Drop this package's modules and its registered Keras classes."""
    for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    ours = [name for name in object_registration.GLOBAL_CUSTOM_OBJECTS if name.startswith(PACKAGE + ">")]
    for name in ours:
        del object_registration.GLOBAL_CUSTOM_OBJECTS[name]
    for cls in [cls for cls, name in object_registration.GLOBAL_CUSTOM_NAMES.items() if name.startswith(PACKAGE + ">")]:
        del object_registration.GLOBAL_CUSTOM_NAMES[cls]
    assert all(keras.saving.get_registered_object(name) is None for name in ours)


def _cli(argv):
    from keras_bertology.cli import main

    code = main([str(arg) for arg in argv])
    assert code == 0, f"bertology {' '.join(map(str, argv))} exited {code}"


def export(case, scratch):
    _cli(["export", case["run"], "--out", scratch / "saved"])
    import tensorflow as tf

    served = tf.saved_model.load(str(scratch / "saved"))
    outputs = served.signatures["serving_default"]
    assert outputs is not None
    return sorted(served.signatures)


def export_hf(case, scratch):
    _cli(["export", case["run"], "--format", "hf", "--out", scratch / "hf"])
    return sorted(path.name for path in (scratch / "hf").iterdir())


def backbone(case, scratch):
    from keras_bertology.models import Backbone

    model = Backbone.from_preset(case["run"])
    return type(model).__name__


def pretrainer(case, scratch):
    from keras_bertology.models import Pretrainer

    return type(Pretrainer.from_preset(case["run"])).__name__


def tokenizer(case, scratch):
    from keras_bertology.tokenizers.base import Tokenizer

    loaded = Tokenizer.from_preset(case["run"])
    return loaded.tokenize(tf.constant(TEXTS[:1])).to_list()


def preprocessor(case, scratch):
    from keras_bertology.data.preprocessor import TextPreprocessor

    inputs = TextPreprocessor.from_preset(case["run"])(tf.constant(TEXTS))
    return {name: list(value.shape) for name, value in inputs.items()}


def finetune(case, scratch):
    _cli(["finetune", "--task", case["task"], "--from", case["run"], "--epochs", "1", "--batch-size", "8",
          "--seq-len", "16", "--last-epoch", "--results-only", "--out", scratch / "finetuned"])
    return json.loads((scratch / "finetuned" / "results.json").read_text())["test"]


README = Path(__file__).resolve().parents[2] / "README.md"


def readme(case, scratch):
    """The README's first Python block on this run (its hf:// line left to test_readme_python.py). Where the
    backbone also has a decoder, calling it with a packed text is refused in one line that names the call
    that works, and the block then runs with that call."""
    from keras_bertology.errors import ConfigError

    section = README.read_text(encoding="utf-8").split("\n## Python API\n", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    block = "\n".join(line for line in block.splitlines() if "hf://" not in line)
    block = block.replace('"runs/bert-tiny-shakespeare"', repr(case["run"]))
    try:
        exec(compile(block, str(README), "exec"), {})
        return "ran"
    except ConfigError as error:
        if ".text_encoder()" not in str(error) or "\n" in str(error):
            raise
        exec(compile(block.replace("backbone(preprocess", "backbone.text_encoder()(preprocess"), str(README),
                     "exec"), {})
        return f"refused: {error}"


PATHS = {"export": export, "export-hf": export_hf, "backbone": backbone, "pretrainer": pretrainer,
         "tokenizer": tokenizer, "preprocessor": preprocessor, "finetune": finetune, "readme": readme}


def run_case(case, path):
    """What `path` returned on `case`, or the error it ended in (its last line, and the traceback)."""
    forget_the_package()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        try:
            result = {"ok": True, "value": PATHS[path](case, Path(scratch))}
        except BaseException as error:  # noqa: B036  (a SystemExit from the CLI is a result too)
            result = {"ok": False, "error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()}
    return dict(result, seconds=round(time.perf_counter() - start, 2))


def main(cases_file, results_file):
    results = []
    for case in json.loads(Path(cases_file).read_text()):
        for path in case["paths"]:
            results.append({"run": case["run"], "path": path, **run_case(case, path)})
            Path(results_file).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:])
