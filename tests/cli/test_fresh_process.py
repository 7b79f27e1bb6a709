"""Every loading path of every family in a NEW process: a run folder as pretraining writes it, and where
transformers has the model, a converted checkpoint of each head the family imports, each read by `bertology
export`, `export --format hf`, `Backbone`/`Pretrainer`/`Tokenizer`/`TextPreprocessor.from_preset` and
`finetune --from` where only what the archive names can be found (tests/support/fresh_process_paths.py)."""

import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import transformers

from family_harness import native_run, sentences_of_one_play
from forked_python import run_python
from keras_bertology.cli import main
from keras_bertology.convert.hf_checkpoint import convert_hf_checkpoint
from keras_bertology.models import FAMILIES
from keras_bertology.runs import read_run_description, save_run_model

DRIVER = Path(__file__).parents[1] / "support" / "fresh_process_paths.py"
# The transformers classes each family's converter imports (Transformer-XL's left transformers in version 5).
HF_HEADS = {
    "bert": ("BertModel", "BertForPreTraining", "BertForMaskedLM"),
    "roberta": ("RobertaModel", "RobertaForMaskedLM"),
    "albert": ("AlbertModel", "AlbertForPreTraining", "AlbertForMaskedLM"),
    "electra": ("ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM"),
    "xlnet": ("XLNetModel", "XLNetLMHeadModel"),
    "gpt": ("GPT2Model", "GPT2LMHeadModel"),
    "deberta": ("DebertaModel", "DebertaForMaskedLM"),
    "deberta-v3": ("DebertaV2Model", "DebertaV2ForMaskedLM"),
    "bigbird": ("BigBirdModel", "BigBirdForPreTraining", "BigBirdForMaskedLM"),
    "distilbert": ("DistilBertModel", "DistilBertForMaskedLM"),
    "ernie": ("ErnieModel", "ErnieForPreTraining", "ErnieForMaskedLM"),
    "modernbert": ("ModernBertModel", "ModernBertForMaskedLM"),
    "t5": ("T5Model", "T5ForConditionalGeneration", "T5EncoderModel"),
}
LOADING_PATHS = ("backbone", "pretrainer", "tokenizer", "preprocessor", "export-hf")
WHOLE_JOBS = ("readme", "export", "finetune")
# CI's share of the whole jobs (each some seconds a run): an encoder, the encoder-decoder, and the converted
# head whose classes are another family's (the archive that failed before the loader read its modules).
WHOLE_JOBS_IN_CI = ("bert/run", "t5/run", "deberta-v3/DebertaV2ForMaskedLM-run")


def _converted_heads(family_name, run, root):
    """Run folders converted from each transformers head of the family: the run exported to transformers,
    read back by each head class (heads it lacks start random), saved, and converted."""
    exported = root / "hf"
    assert main(["export", str(run), "--format", "hf", "--out", str(exported)]) == 0
    weights = ("config.json", "model.safetensors")
    tokenizer_files = [p for p in exported.iterdir() if p.is_file() and p.name not in weights]
    made = []
    for head in HF_HEADS[family_name]:
        checkpoint = root / head
        getattr(transformers, head).from_pretrained(str(exported)).save_pretrained(str(checkpoint))
        for path in tokenizer_files:
            shutil.copy(path, checkpoint / path.name)
        converted, _ = convert_hf_checkpoint(checkpoint, seq_len=16)
        save_run_model(root / f"{head}-run", converted)
        made.append(root / f"{head}-run")
    return made


def _task(folder):
    """A two-class TSV task for `finetune --from`."""
    folder.mkdir()
    rows = ["label\ttext"] + [f"{'wet' if i % 2 else 'dry'}\tthe {'rain' if i % 2 else 'sun'} falls on {d}"
                              for i, d in enumerate(["our king", "the sea", "his crown", "the summer"] * 6)]
    (folder / "train.tsv").write_text("\n".join(rows[:17]) + "\n")
    (folder / "test.tsv").write_text("\n".join(rows[:1] + rows[17:]) + "\n")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(the folder of the runs, [(family, run folder, whether it was converted)]): each family's run as
    pretraining writes it, and each transformers head converted."""
    root = tmp_path_factory.mktemp("fresh")
    sentences = sentences_of_one_play()
    made = []
    for name, family in sorted(FAMILIES.items()):
        run = root / name / "run"
        native_run(family, run, sentences)
        made.append((family, run, False))
        if name in HF_HEADS:
            made += [(family, folder, True) for folder in _converted_heads(name, run, root / name)]
    return root, made


def _run_in_a_new_process(root, groups, name):
    """{(run folder relative to `root`, path): result} of each group's `paths` on each of its `runs`, all groups
    in one new process (one TensorFlow start; the driver forgets this package before each path of each run):
    the pretrainer's only where a folder has pretraining heads, `export --format hf` only for families with a
    transformers layout."""
    task = root / "task" if (root / "task").is_dir() else _task(root / "task")
    cases = []
    for runs, paths in groups:
        for family, folder, _ in runs:
            skipped = {"pretrainer": not read_run_description(folder)["has_pretraining_heads"],
                       "export-hf": family.conversion.hf_exporter_path is None}
            cases.append({"run": str(folder), "family": family.name, "task": str(task),
                          "paths": [path for path in paths if not skipped.get(path)]})
    cases_file, results_file = root / f"{name}-cases.json", root / f"{name}-results.json"
    cases_file.write_text(json.dumps(cases))
    # Forked from a process that imported TensorFlow only (forked_python): the driver imports the rest itself.
    done = run_python([sys.executable, str(DRIVER), str(cases_file), str(results_file)], timeout=3000,
                      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-3000:]
    results = {(_name(root, r["run"]), r["path"]): r
               for r in json.loads(results_file.read_text())}
    assert len(results) == sum(len(case["paths"]) for case in cases), "a run and path ran twice"
    failed = [f"{run} {path}: {r['error']}" for (run, path), r in results.items() if not r["ok"]]
    assert not failed, "\n".join(failed)
    for runs, paths in groups:
        assert {(_name(root, folder), path) for _, folder, _ in runs
                for path in paths if path not in ("pretrainer", "export-hf")} <= set(results)
    return results


def _name(root, folder):
    return Path(folder).relative_to(root).as_posix()


def _archive_modules(folder):
    """The modules of this package that a run folder's model archive names (what its loading depends on)."""
    from keras_bertology.keras_archives import modules_named_in

    model = Path(folder) / "model"
    archive = model / "pretrainer.keras" if (model / "pretrainer.keras").is_file() else model / "backbone.keras"
    return frozenset(modules_named_in(archive))


def _one_per_class_set(made):
    """(the first run of each family whose archive names a set of modules no run before it named, the rest):
    what loading depends on is the family's files and the archive's modules."""
    seen, first, rest = set(), [], []
    for run in made:
        key = (run[0].name, _archive_modules(run[1]))
        (rest if key in seen else first).append(run)
        seen.add(key)
    return first, rest


def test_every_family_and_converted_head_loads_in_a_new_process_and_the_readme_serves_and_tunes_some(runs):
    """The loading paths on one run of each family and set of archived modules (31 of 49); the whole jobs (the
    SavedModel, fine-tuning, the README's Python block) on the runs of WHOLE_JOBS_IN_CI; the rest in the
    extended test below.

    The README's block runs as written on an encoder; an encoder-decoder's whole model refuses a packed text
    in one line naming its text encoder, with which the block runs."""
    root, made = runs
    assert {family.name for family, _, _ in made} == set(FAMILIES)
    assert {f"{name}/{head}-run" for name, heads in HF_HEADS.items() for head in heads} <= \
        {_name(root, folder) for _, folder, _ in made}
    chosen = [run for run in made if _name(root, run[1]) in WHOLE_JOBS_IN_CI]
    assert len(chosen) == len(WHOLE_JOBS_IN_CI)
    results = _run_in_a_new_process(root, [(_one_per_class_set(made)[0], LOADING_PATHS), (chosen, WHOLE_JOBS)],
                                    "loading-and-jobs")
    refused = {run for (run, path), r in results.items() if path == "readme" and r["value"] != "ran"}
    assert refused == {"t5/run"}


@pytest.mark.extended
def test_every_family_and_converted_head_loads_serves_and_fine_tunes_in_a_new_process(runs):
    root, made = runs
    others = [run for run in made if _name(root, run[1]) not in WHOLE_JOBS_IN_CI]
    results = _run_in_a_new_process(root, [(_one_per_class_set(made)[1], LOADING_PATHS), (others, WHOLE_JOBS)],
                                    "other-loading-and-jobs")
    with_decoder = {_name(root, folder) for _, folder, _ in others
                    if read_run_description(folder)["backbone"].get("num_decoder_layers")}
    assert {run for (run, path), r in results.items() if path == "readme" and r["value"] != "ran"} == with_decoder


def test_the_loader_imports_only_this_packages_modules_that_an_archive_names(tmp_path, monkeypatch):
    """The modules are read from the whole config (a backbone nested in a pretrainer, a layer in a list), and
    a module outside the package is never imported, whatever the archive says."""
    from keras_bertology.keras_archives import modules_named_in, register_classes_of

    imported = []
    monkeypatch.setattr("importlib.import_module", imported.append)
    config = {"module": "keras_bertology.models.deberta.pretrainer", "config": {
        "backbone": {"module": "keras_bertology.models.deberta.backbone", "config": {}},
        "layers": [{"module": "keras", "config": {}}, {"module": "this", "config": {}},
                   {"module": "keras_bertology_lookalike", "config": {}}]}}
    archive = tmp_path / "model.keras"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("config.json", json.dumps(config))
    assert modules_named_in(archive) == ["keras_bertology.models.deberta.pretrainer",
                                         "keras_bertology.models.deberta.backbone"]
    register_classes_of(archive)
    assert imported == modules_named_in(archive)
