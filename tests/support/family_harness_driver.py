"""The fresh-process half of the family harness (tests/support/family_harness.py), as a new process meets a
run folder: `python family_harness_driver.py CASES.json RESULTS.json`.

For each family in turn, with this package forgotten before it (`fresh_process_paths.forget_the_package`)
and the plug-ins registered again: the run folder loaded by the library's loader computes the expected
outputs bit for bit, and it exports as a SavedModel whose `serve` and `serve_ids` agree.
"""

import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the tests' helpers

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from fresh_process_paths import forget_the_package  # noqa: E402

SERVE_TOLERANCE = 1e-5


def check_case(case, plugins):
    from keras_bertology.data.packing import fit_to_batch
    from keras_bertology.export import export_saved_model
    from keras_bertology.lazy_imports import import_object
    from keras_bertology.models import get_family
    from keras_bertology.runs import load_run_model

    for plugin in plugins:
        sys.modules.pop(plugin.partition(":")[0], None)
        import_object(plugin)()
    expected = np.load(case["expected"])
    batch = {name.split("/", 1)[1]: expected[name] for name in expected.files if name.startswith("input/")}
    run = load_run_model(case["run"])
    for part, model in (("backbone", run.backbone), ("pretrainer", run.pretrainer)):
        outputs = model({name: batch[name] for name in model.input}, training=False)
        compared = [name for name in outputs if f"{part}/{name}" in expected.files]  # not the random draws
        assert compared, f"{part}: no output to compare"
        for name in compared:
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(outputs[name]), expected[f"{part}/{name}"],
                                          err_msg=f"{part} {name}")
    if case["export"] is None:
        return []
    served = tf.saved_model.load(export_saved_model(run, case["export"]))
    texts = tf.constant(case["texts"])
    by_strings = served.serve(texts)
    serve_ids = served.signatures["serve_ids"]
    packed = get_family(run.family).pack_text(run.tokenizer, run.seq_len, texts)
    packed = fit_to_batch(packed, packed["padding_mask"])
    by_ids = serve_ids(**{name: tf.cast(packed[name], tf.int32) for name in serve_ids.structured_input_signature[1]})
    as_served = run.backbone.served_outputs(by_ids, packed)  # what `serve` makes of the encoder's outputs
    assert sorted(as_served) == sorted(by_strings)
    for name, value in as_served.items():
        np.testing.assert_allclose(np.asarray(value), by_strings[name].numpy(), rtol=0, atol=SERVE_TOLERANCE,
                                   err_msg=f"serve_ids {name}")
    return sorted(served.signatures)


def main(cases_file, results_file):
    given = json.loads(Path(cases_file).read_text())
    sys.path[:0] = given["paths"]
    results = {}
    for case in given["cases"]:
        forget_the_package()
        start = time.perf_counter()
        try:
            results[case["family"]] = {"ok": True, "signatures": check_case(case, given["plugins"])}
        except Exception as error:  # noqa: BLE001  (each family's failure is reported, the others still run)
            results[case["family"]] = {"ok": False, "error": f"{type(error).__name__}: {error}",
                                       "trace": traceback.format_exc()}
        results[case["family"]]["seconds"] = round(time.perf_counter() - start, 1)
        Path(results_file).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
