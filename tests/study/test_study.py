"""`bertology study`: equal compute per arm, every arm fine-tuned, claims judged, resumable, bad input refused."""

import dataclasses
import json
import math
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest

from keras_bertology.cli import main
from keras_bertology.errors import ConfigError
from keras_bertology.study.arms import ARM_NAMES, ARMS, CLAIMS, FACTORS, SCALES
from keras_bertology.study.options import StudyOptions
from keras_bertology.study.report import judge, summarize

SMOKE = ["--scale", "smoke", "--seeds", "2"]
# CI's smoke study: the reference arm, the arm whose run differs most from it (two stages whose share
# follows the steps, at another cost a step) and the arm that learns from the reference's run (a student).
SMOKE_ARMS = ["bert", "electra-two-stage", "distilbert"]
SMOKE_TASKS = ["bbc-news"]


def _smoke_args(out, workers=2):
    # No --corpus: the arms pretrain on the tasks' own training text (the smoke keeps 48 examples of each split).
    # Two workers: the runs go to processes of a thread each, and their results come back to the study.
    # --all-tasks: every arm is fine-tuned whatever the gate says of a few steps' pretraining. One task: a
    # tagging task's runs are the finetune tests', and the flow test fakes both kinds.
    return [*SMOKE, "--out", str(out), "--arms", *SMOKE_ARMS, "--tasks", *SMOKE_TASKS, "--vocab-size", "1000",
            "--workers", str(workers), "--all-tasks"]


def _bertology(capsys, *args):
    """`bertology *args` in this process (the study's runs go to processes of their own, or run here)."""
    status = main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, status, captured.out, captured.err)


def test_claims_name_arms_of_the_study_and_relations_and_factors_the_report_knows():
    for claim in CLAIMS:
        assert {claim.arm, claim.against} <= set(ARM_NAMES) and claim.relation in ("better", "same", "at least")
        assert claim.factor in FACTORS
    assert ARMS[0].name == "bert"  # the budget is BERT's, as the papers' baselines are


def test_step_share_options_follow_the_steps_of_the_run():
    two_stage = next(arm for arm in ARMS if arm.step_share_options)
    assert two_stage.options_for(1000) == {"two_stage_steps": 500}
    assert two_stage.options_for(1) == {"two_stage_steps": 1}
    assert next(arm for arm in ARMS if arm.name == "albert-nsp").options_for(7) == {"sentence_task": "nsp"}


def test_a_student_arm_reads_its_teachers_run_folder_at_half_the_depth(tmp_path):
    student = next(arm for arm in ARMS if arm.depends_on)
    assert student.depends_on == ("bert",) and student.options_for(10, tmp_path) == {
        "teacher": str(tmp_path / "pretrain" / "bert")}
    assert student.encoder_for({"num_layers": 4, "hidden_size": 128, "intermediate_size": 512}) == {
        "num_layers": 2, "hidden_size": 128, "intermediate_size": 512}
    assert student.encoder_for({"num_layers": 1, "hidden_size": 32, "intermediate_size": 64}) == {
        "num_layers": 1, "hidden_size": 32, "intermediate_size": 64}


def test_the_gated_arm_has_as_many_feed_forward_weights_as_the_others():
    from keras_bertology.models import get_family

    scale = SCALES["tiny"]
    modern = next(arm for arm in ARMS if arm.name == "modernbert")
    sizes = modern.encoder_for(scale.encoder)
    assert sizes["intermediate_size"] == round(scale.intermediate_size * 2 / 3)
    family = get_family("modernbert")
    config = family.backbone_config("modernbert-tiny", **family.sized_config(sizes))
    backbone = family.backbone_cls(**config)
    gated = backbone.get_layer("encoder_block_1")
    weights = sum(int(np.prod(dense.kernel.shape)) for dense in (gated.intermediate_dense, gated.gate_dense,
                                                                  gated.output_dense))
    # As many as whole widths allow: 3 x 341 columns against 2 x 512 at the tiny scale, one column fewer.
    assert abs(weights - 2 * scale.hidden_size * scale.intermediate_size) <= 3 * scale.hidden_size


# Per-seed scores (paired by seed): the differences' mean against their standard error sd / sqrt(n).
@pytest.mark.parametrize("relation, a, b, verdict", [
    ("better", [0.80, 0.81, 0.79], [0.70, 0.71, 0.69], "reproduced"),
    ("better", [0.70, 0.71, 0.69], [0.80, 0.81, 0.79], "reversed"),
    ("better", [0.71, 0.75, 0.66], [0.70, 0.70, 0.70], "undecided"),
    ("same", [0.71, 0.75, 0.66], [0.70, 0.70, 0.70], "reproduced"),
    ("same", [0.80, 0.81, 0.79], [0.70, 0.71, 0.69], "not reproduced"),
    ("at least", [0.69, 0.65, 0.74], [0.70, 0.70, 0.70], "reproduced"),
    ("at least", [0.60, 0.61, 0.59], [0.70, 0.70, 0.70], "not reproduced"),
    ("same", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], "no signal"),
    ("better", [0.5, 0.6, 0.7], [0.4, 0.5, 0.6], "reproduced"),
    # Seeds move both arms together: unpaired, 0.02 is lost in a 0.1 spread; paired, it is decided.
    ("better", [0.52, 0.62, 0.72, 0.82], [0.50, 0.60, 0.71, 0.80], "reproduced"),
])
def test_a_claim_needs_a_paired_difference_beyond_two_standard_errors(relation, a, b, verdict):
    result = judge(relation, a, b)
    differences = [x - y for x, y in zip(a, b)]
    assert result["verdict"] == verdict
    assert result["difference"] == pytest.approx(sum(differences) / len(a))
    mean = sum(differences) / len(a)
    assert result["standard_error"] == pytest.approx(
        math.sqrt(sum((d - mean) ** 2 for d in differences) / (len(a) - 1) / len(a)), abs=1e-12)


def test_judging_needs_the_same_seeds_for_both_arms():
    with pytest.raises(ValueError):
        judge("better", [0.1, 0.2, 0.3], [0.1, 0.2])


def test_the_decidable_difference_is_two_pooled_paired_standard_errors():
    from keras_bertology.study.report import decidable_difference

    # Pairs' differences: (a-b) = [0, .02, -.02, 0], (a-c) = (b-c) shifted: variances pooled over the three pairs.
    a, b, c = [0.50, 0.62, 0.58, 0.70], [0.50, 0.60, 0.60, 0.70], [0.40, 0.50, 0.50, 0.60]
    variances = [statistics.variance([x - y for x, y in zip(p, q)]) for p, q in ((a, b), (a, c), (b, c))]
    assert decidable_difference([a, b, c]) == pytest.approx(2 * math.sqrt(sum(variances) / 3 / 4))
    assert decidable_difference([[0.3, 0.5], [0.1, 0.3]]) == pytest.approx(0, abs=1e-12)  # seeds move both alike: any gap decides
    assert decidable_difference([a]) is None


def test_summaries_use_the_sample_standard_deviation_and_keep_the_seeds():
    assert summarize([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "n": 3, "seeds": [1.0, 2.0, 3.0]}
    assert summarize([0.5]) == {"mean": 0.5, "std": 0.0, "n": 1, "seeds": [0.5]}


@pytest.mark.parametrize("changes, words", [
    ({"scale": "huge"}, "--scale"),
    ({"arms": ("bert", "nonesuch")}, "nonesuch"),
    ({"arms": ("bert", "bert")}, "twice"),
    ({"arms": ()}, "--arms"),
    ({"tasks": ()}, "--tasks"),
    ({"tasks": ("a/data", "b/data")}, "two tasks alike"),
    ({"seeds": 1}, "--seeds"),
    ({"workers": 0}, "--workers"),
    ({"seed": -1}, "--seed"),
    ({"arms": ("roberta", "distilbert")}, "--arms distilbert learns from the bert arm's run: add bert"),
    ({"arms": ("distilbert", "bert")}, "--arms distilbert cannot come first"),
])
def test_bad_options_are_refused_before_anything_runs(changes, words):
    with pytest.raises(ConfigError, match=words):
        StudyOptions(**changes).validate()


def test_workers_return_every_result_to_the_study_and_raise_a_failed_run(monkeypatch):
    import os

    from keras_bertology.study.workers import Workers

    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "7")  # a worker sets its own share, whatever it inherits
    jobs = [(2, 3), (3, 2), (5, 1)]
    for count in (1, 2):
        got = []
        with Workers(count) as workers:
            workers.run_all(pow, jobs, lambda job, result: got.append((job, result)))
            if count == 1:
                assert got == [((2, 3), 8), ((3, 2), 9), ((5, 1), 5)]  # in order, here
            else:  # the same processes take the next runs, each with its share of the cores
                workers.run_all(os.getpid, [()] * 4, lambda job, result: got.append(result))
                workers.run_all(os.getenv, [("TF_NUM_INTRAOP_THREADS",)] * 2, lambda job, result: got.append(result))
                assert len(set(got[3:7])) <= 2 and os.getpid() not in got[3:7]
                assert got[7:] == [str(max(1, os.cpu_count() // 2))] * 2
                with pytest.raises(ZeroDivisionError):
                    workers.run_all(divmod, [(1, 0), (1, 1)], lambda job, result: None)
        assert sorted(got[:3]) == [((2, 3), 8), ((3, 2), 9), ((5, 1), 5)]


def test_a_failed_or_interrupted_study_stops_the_runs_in_flight(tmp_path):
    """A run that raises (or Ctrl-C, SIGTERM) ends the block at once: the other worker's run is stopped
    rather than awaited (a pretraining run resumes from its checkpoint, a fine-tuning run starts again)."""
    import os

    from keras_bertology.study.workers import Workers

    pid_file, finished = tmp_path / "pid", tmp_path / "finished"
    slow = (f"open({str(pid_file)!r}, 'w').write(str(__import__('os').getpid())) and "
            f"(__import__('time').sleep(30) or open({str(finished)!r}, 'w').write('done'))")
    # Raises once the slow run has started (whichever worker took it).
    failing = (f"([__import__('time').sleep(0.1) for _ in range(600) if not __import__('os').path.exists("
               f"{str(pid_file)!r})], 1 / 0)")
    with pytest.raises(ZeroDivisionError):
        with Workers(2) as workers:
            workers.run_all(eval, [(slow,), (failing,)], lambda job, result: None)
    assert not finished.exists()  # not awaited
    assert int(pid_file.read_text()) != os.getpid()
    with pytest.raises(ProcessLookupError):  # and stopped
        os.kill(int(pid_file.read_text()), 0)


def test_a_study_process_stays_on_tensorflow_whatever_backend_its_pretraining_asks_for(monkeypatch):
    from keras_bertology import cli

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert cli._select_backend(["study", "--backend", "jax", "--scale", "smoke"]) is None
    assert __import__("os").environ["KERAS_BACKEND"] == "tensorflow"
    with pytest.raises(ConfigError, match="--backend must be one of tensorflow, jax"):
        StudyOptions(backend="torch").validate()


def test_workers_on_another_backend_run_keras_there_even_one_at_a_time():
    from keras_bertology.study.workers import Workers

    got = []
    with Workers(1, backend="jax") as workers:  # `eval` travels to the worker by name, as a builtin
        workers.run_all(eval, [("__import__('keras').config.backend()",), ("__import__('os').getpid()",)],
                        lambda job, result: got.append(result))
    import os

    assert got[0] == "jax" and got[1] != os.getpid()


def test_each_point_of_a_run_counts_the_flops_of_the_stages_it_went_through():
    from keras_bertology.study.arms import Scale
    from keras_bertology.study.run import ArmRun

    scale = Scale(1, 8, 1, 8, 8, 2, reference_steps=1, budgets=(0.25, 0.5, 1.0), label_counts=(4,), verdict_labels=4)
    run = ArmRun(ARMS[0], budget=8.04 * 100, cost={"average": 8.0, "stages": [(0.5, 10.0), (0.5, 6.0)]}, scale=scale)
    assert (run.steps, run.window) == (100, 10) and run.snapshots == (20, 50)  # 0.25 x 100 -> 2 whole windows
    assert [(p.steps, p.flops) for p in run.points] == [(20, 200.0), (50, 500.0), (100, 800.0)]
    assert run.flops == 800.0 and run.points[0].key == "bert/budget-0.25"
    # Each point is fine-tuned from the encoder its run kept at that step, the last from the run itself.
    assert run.points[0].folder(Path("s")) == Path("s/pretrain/bert/snapshots/step-0000020")
    assert run.points[-1].folder(Path("s")) == Path("s/pretrain/bert")


def test_token_level_tasks_take_their_verdicts_at_their_own_label_count():
    import types

    from keras_bertology.study.arms import Scale
    from keras_bertology.study.run import _label_counts

    def task(kind, examples):
        return types.SimpleNamespace(kind=kind, splits={"train": [None] * examples})

    scale = Scale(1, 8, 1, 8, 8, 2, reference_steps=1, budgets=(1.0,), label_counts=(32, 128, 512),
                  verdict_labels=128, token_verdict_labels=32)
    assert _label_counts(scale, task("classification", 1000)) == {"all": [32, 128, 512], "verdict": 128}
    for kind in ("tagging", "spans"):
        assert _label_counts(scale, task(kind, 1000)) == {"all": [32, 128, 512], "verdict": 32}
    # A count above the training split becomes all of it; without a token count every task takes verdict_labels.
    assert _label_counts(scale, task("classification", 100)) == {"all": [32, 100], "verdict": 100}
    untyped = Scale(1, 8, 1, 8, 8, 2, reference_steps=1, budgets=(1.0,), label_counts=(32, 128), verdict_labels=128)
    assert _label_counts(untyped, task("tagging", 1000))["verdict"] == 128


def test_the_pretraining_text_is_the_tasks_training_text_without_labels(tmp_path):
    from keras_bertology.finetune.datasets import load_task
    from keras_bertology.study.compute import write_task_text

    bbc, wnut = load_task("bbc-news", 30), load_task("wnut16", 30)
    lines = write_task_text([bbc, wnut], tmp_path).read_text(encoding="utf-8").splitlines()
    text = [json.loads(line) for line in lines]
    assert all(set(document) == {"text"} for document in text)  # no label field
    train = {e["text"] for e in bbc.splits["train"]} | {" ".join(e["words"]) for e in wnut.splits["train"]}
    held = {e["text"] for split in ("dev", "test") for e in bbc.splits[split]}
    held |= {" ".join(e["words"]) for split in ("dev", "test") for e in wnut.splits[split]}
    assert {document["text"] for document in text} == train and not train & held
    # bbc-names tags bbc-news's sentences: beside bbc-news it adds no text, alone it gives its sentences.
    names = load_task("bbc-names", 30)
    for tasks, expected in (([bbc, names], {e["text"] for e in bbc.splits["train"]}),
                            ([names], {" ".join(e["words"]) for e in names.splits["train"]})):
        folder = tmp_path / "-".join(task.name for task in tasks)
        folder.mkdir()
        lines = write_task_text(tasks, folder).read_text(encoding="utf-8").splitlines()
        assert {json.loads(line)["text"] for line in lines} == expected


def test_every_scale_fits_its_arms():
    for scale in SCALES.values():
        assert scale.hidden_size % scale.num_heads == 0 and max(scale.budgets) == 1.0
        assert {scale.verdict_labels_of("classification"), scale.verdict_labels_of("tagging")} <= set(
            scale.label_counts) and scale.seeds >= 2


def test_a_study_folder_refuses_a_scale_whose_recipe_changed_since(tmp_path, monkeypatch):
    from keras_bertology.study import arms
    from keras_bertology.study.run import _State

    options = StudyOptions(scale="smoke", out=str(tmp_path))
    _State.open(tmp_path, options).save()
    assert _State.open(tmp_path, options)["options"] == options.plan_key()  # the same plan resumes
    changed = dataclasses.replace(SCALES["smoke"], finetune_epochs=SCALES["smoke"].finetune_epochs + 1)
    monkeypatch.setitem(arms.SCALES, "smoke", changed)
    with pytest.raises(ConfigError, match=r"other options \(changed: recipe\)"):
        _State.open(tmp_path, options)


def test_bad_input_gets_one_line_and_nothing_is_trained(tmp_path, capsys):
    missing = _bertology(capsys, "study", *SMOKE, "--out", str(tmp_path / "s"), "--tasks", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "bertology: error:" in missing.stderr
    assert not (tmp_path / "s" / "pretrain").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    busy = _bertology(capsys, "study", *SMOKE, "--out", str(tmp_path / "busy"))
    assert busy.returncode == 2 and "holds files that bertology did not write" in busy.stderr
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]


@pytest.mark.slow
def test_the_smoke_study_gives_every_arm_equal_compute_and_resumes(tmp_path, capsys):
    out = tmp_path / "study"
    first = _bertology(capsys, "study", *_smoke_args(out))
    assert first.returncode == 0, first.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    pretrained = json.loads((out / "study.json").read_text())["pretrain"].values()
    assert {run["backend"] for run in pretrained} == {"tensorflow"}
    assert [(row["arm"], row["budget"]) for row in results["rows"]] == [(a, b) for a in SMOKE_ARMS for b in (0.5, 1)]
    halves = {row["arm"]: row for row in results["rows"] if row["budget"] == 0.5}
    rows = {row["arm"]: row for row in results["rows"] if row["budget"] == 1}
    for name, row in halves.items():  # the encoder after half the run, probed from its snapshot, not fine-tuned
        assert row["steps"] == round(rows[name]["steps"] / 2) and row["pretrain_flops"] < rows[name]["pretrain_flops"]
        assert (out / "pretrain" / name / "snapshots" / f"step-{row['steps']:07d}" / "model" / "run.json").is_file()
        assert row["scores"] == {}
    per_step = {name: results["flops_per_step"][name]["average"] for name in rows}
    budget = SCALES["smoke"].reference_steps * per_step["bert"]
    for name, row in rows.items():  # equal compute, up to rounding the steps
        assert abs(row["pretrain_flops"] - budget) <= per_step[name] / 2
        assert row["steps"] == round(budget / per_step[name])
        for task in results["tasks"]:
            assert row["scores"][task]["n"] == 2 and 0 <= row["scores"][task]["mean"] <= 1
    # Learning curves of the reference arm at the full budget (and random init) over the label counts; budget
    # points at the verdict count.
    assert list(results["learning_curves"]) == ["bert"]
    for curve in [*results["learning_curves"].values(), results["random_init"]]:
        assert {task: list(points) for task, points in curve.items()} == {"bbc-news": ["8", "16"]}
    assert results["learning_curves"]["bert"]["bbc-news"]["16"] == rows["bert"]["scores"]["bbc-news"]
    # Paired: seed s learns from the same drawn examples whatever the arm (the run's results name them).
    drawn = {json.loads((out / "finetune" / key / "bbc-news" / "labels-16" / "seed-1" / "results.json").read_text())
             ["data"] for key in ("bert/budget-1", "electra-two-stage/budget-1", "random-init")}
    assert len(drawn) == 1 and "16 training examples drawn with seed 1" in drawn.pop()
    # The arms' steps cost different compute, so they train for different numbers of steps.
    assert len({row["steps"] for row in rows.values()}) > 1
    # The student trains after its teacher, the study's own bert run, whose forward passes its steps pay for.
    student = json.loads((out / "pretrain" / "distilbert" / "metrics.json").read_text())
    assert student["teacher"] == str(out / "pretrain" / "bert")
    assert per_step["distilbert"] > per_step["bert"] / 2
    stages = results["flops_per_step"]["electra-two-stage"]["stages"]
    assert [share for share, _ in stages] == [0.5, 0.5] and stages[0][1] != stages[1][1]
    assert {claim["verdict"] for claim in results["claims"]} <= {"reproduced", "reversed", "undecided",
                                                                 "not reproduced", "no signal", "not comparable"}
    # Claims are judged only on the tasks where the reference arm beat random initialisation.
    judged = [claim for claim in CLAIMS if {claim.arm, claim.against} <= set(SMOKE_ARMS)]
    paying = [task for task, gate in results["gate"].items() if gate["pays"]]
    assert len(results["claims"]) == sum(len(paying) if claim.task is None else int(claim.task in paying)
                                         for claim in judged)
    # Every arm records its vocabulary; a claim whose arms' vocabularies differ is refused, and only such a one.
    assert set(results["arms"]) == set(SMOKE_ARMS)
    assert results["arms"]["distilbert"]["tokenizer"] == results["arms"]["bert"]["tokenizer"]  # its teacher's
    for claim in results["claims"]:
        differ = results["arms"][claim["arm"]]["tokenizer"] != results["arms"][claim["against"]]["tokenizer"]
        assert (claim["verdict"] == "not comparable") == (differ and claim["factor"] != "tokenizer"), claim
    assert set(results["decidable_difference"]) == {"bbc-news"}
    # Linear probes of every point and control on the study's probing task, each depth (embeddings and the one
    # layer) and the mix; each point's gain is over its own arm's control.
    probed = results["probing"]["bbc-news"]
    controls = {"random-init", "electra-two-stage/random-init", "distilbert/random-init"}
    assert set(probed) == {f"{arm}/budget-{b}" for arm in SMOKE_ARMS for b in ("0.5", "1")} | controls
    for key, record in probed.items():
        assert len(record["layers"]) == 2 and 0 <= record["mix"]["mean"] <= 1 and record["mix"]["n"] == 2
        assert ("gain" in record) == (key not in controls) and sum(record["mix_weights"]) == pytest.approx(1)
    report = (out / "results.md").read_text()
    assert "## Linear probes" in report
    assert (out / "score_vs_compute.png").stat().st_size > 10_000 and "| no pretraining |" in report
    assert all(f"| {task} |" in report for task in results["gate"])
    text = [json.loads(line)["text"] for line in (out / "pretraining_text.jsonl").read_text().splitlines()]
    from keras_bertology.finetune.datasets import load_task

    # Each training article once: the smoke keeps bbc-news's first 48.
    assert len(text) == len(set(text)) == len({e["text"] for e in load_task("bbc-news", 48).splits["train"]})
    assert results["pretraining_text"] == "the tasks' training text, without labels"

    # Interrupted: one pretraining run and one fine-tuning run lost; the rest is not run again.
    state = json.loads((out / "study.json").read_text())
    state["pretrain"].pop("electra-two-stage")
    state["finetune"].pop("bert/budget-1/bbc-news/labels-16/seed-1")
    (out / "study.json").write_text(json.dumps(state))
    kept = (out / "finetune" / "electra-two-stage" / "budget-1" / "bbc-news" / "labels-16" / "seed-0" /
            "results.json").stat().st_mtime_ns
    again = _bertology(capsys, "study", *_smoke_args(out, workers=1))  # the runs left, in the study's process
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("[pretrain") == 1 and again.stdout.count("[finetune") == 1
    assert (out / "finetune" / "electra-two-stage" / "budget-1" / "bbc-news" / "labels-16" / "seed-0" /
            "results.json").stat().st_mtime_ns == kept
    assert json.loads((out / "results.json").read_text())["rows"][1]["scores"] == rows["bert"]["scores"]

    # Without --all-tasks the report holds only the gate's runs on a task where pretraining did not pay.
    from keras_bertology.study.run import study

    runs = (out / "study.json").read_text()
    results = study(StudyOptions(scale="smoke", seeds=2, out=str(out), arms=tuple(SMOKE_ARMS),
                                 tasks=tuple(SMOKE_TASKS), vocab_size=1000, verbose=0))
    assert (out / "study.json").read_text() == runs  # nothing run again
    for task, gate in results["gate"].items():
        finetuned = [(row["arm"], row["budget"]) for row in results["rows"] if task in row["scores"]]
        assert finetuned == ([(a, 1) for a in SMOKE_ARMS] if gate["pays"] else [("bert", 1)])
    refused = not all(gate["pays"] for gate in results["gate"].values())
    assert ("Empty cells: not fine-tuned on" in (out / "results.md").read_text()) == refused

    with pytest.raises(ConfigError, match=r"other options \(changed: seeds\)"):
        study(StudyOptions(scale="smoke", seeds=3, out=str(out), arms=tuple(SMOKE_ARMS), tasks=tuple(SMOKE_TASKS),
                           vocab_size=1000))


def test_the_gate_runs_first_and_other_arms_fine_tune_only_where_pretraining_pays(tmp_path, monkeypatch):
    """The study's flow with its runs faked: BERT loses to random init on bbc-news and wins on bbc-names."""
    from keras_bertology.study import run, steps

    calls = []

    def finetune(scale, key, run_dir, random_init, task, labels, seed, out):
        calls.append((key.split(f"/{task}/")[0], task, labels))
        paying = {"bbc-news": -0.1, "bbc-names": 0.05}[task] if key.startswith("bert/budget-1/") else 0.0
        score = 0.4 + 0.01 * seed + paying + (0.02 * (seed % 2) if random_init else 0.0)
        return {"metric": "f1", "score": score, "dev": score, "seconds": 1.0, "wall_seconds": 2.0}

    monkeypatch.setattr(steps, "_arm_flops", lambda *args: {"average": 1e9, "stages": [[1.0, 1e9]]})
    monkeypatch.setattr(run, "_pretrain", lambda options, scale, arm_run, out: {
        "steps": arm_run.steps, "train_seconds": 1.0, "samples_per_second": 1.0, "precision": "float32",
        "objectives": {"mlm": {"first": {"loss": 7.0}, "last": {"loss": 6.0}}}, "seconds": 1.0})
    monkeypatch.setattr(steps, "_finetune", finetune)
    from keras_bertology.study import probes, report

    probed = []

    def probe(scale, key, run_dir, seeds, control, tasks):  # BERT's full budget reads best, then SpanBERT's
        probed.append((key, seeds, control))
        lead = {"bert/budget-1": 0.1, "spanbert/budget-1": 0.05}.get(key, 0.0)
        return {probes.probe_key(key, task, seed): {"layers": [0.3, 0.4], "mix": 0.5 + lead + 0.01 * seed,
                                                    "mix_weights": [0.25, 0.75]}
                for task in tasks for seed in seeds}

    monkeypatch.setattr(probes, "_probe", probe)
    vocabulary = {"type": "sentencepiece", "lower_case": False, "vocab_size": 1000, "sha256": "0" * 64}
    monkeypatch.setattr(report, "describe_saved_tokenizer", lambda folder: vocabulary)  # no run made one
    options = StudyOptions(scale="smoke", seeds=3, out=str(tmp_path / "s"), arms=("bert", "spanbert", "gpt"),
                           vocab_size=1000, verbose=0)
    results = run.study(options)
    # The gate's six jobs (reference and random init at both label counts of both tasks) come first.
    gate_jobs = {(key, task, labels) for key in ("bert/budget-1", "random-init") for task in ("bbc-news", "bbc-names")
                 for labels in (8, 16)}
    assert set(calls[:24]) == gate_jobs and len(calls) == 24 + 2 * 3 + 2 * 3
    # Then each other arm at its full budget (the probes read the earlier shares), where pretraining paid.
    others = ("spanbert/budget-1", "gpt/budget-1")
    assert set(calls[24:30]) == {(key, "bbc-names", 16) for key in others}
    # Then each other arm's control: its encoder without pretraining, on the same seeds (the reference's is the gate's).
    controls = ("spanbert/random-init", "gpt/random-init")
    assert set(calls[30:]) == {(key, "bbc-names", 16) for key in controls}
    assert {task: gate["pays"] for task, gate in results["gate"].items()} == {"bbc-news": False, "bbc-names": True}
    assert {claim["task"] for claim in results["claims"]} == {"bbc-names"} and results["finetune_runs"] == 36
    # The probes: each point's states once for every seed; each arm's control in one job (each seed draws its weights).
    points = {f"{arm}/budget-{budget}" for arm in ("bert", "spanbert", "gpt") for budget in ("0.5", "1")}
    assert sorted(probed) == sorted([(key, (0, 1, 2), False) for key in points] + [
        (control, (0, 1, 2), True) for control in ("random-init", "spanbert/random-init", "gpt/random-init")])
    names = results["probing"]["bbc-names"]
    assert set(results["probing"]) == {"bbc-news", "bbc-names"} and set(names) == points | {
        "random-init", "spanbert/random-init", "gpt/random-init"}
    assert names["bert/budget-1"]["gain"]["mean"] == pytest.approx(0.1)
    assert names["gpt/budget-1"]["gain"]["mean"] == pytest.approx(0.0) and "gain" not in names["gpt/random-init"]
    assert names["bert/budget-1"]["layers"][1]["mean"] == pytest.approx(0.4) and names["bert/budget-1"]["mix"]["n"] == 3
    assert "| bert/budget-1 | 0.610 ± 0.010 | +0.100 ± 0.000 | 0.300 0.400 | 0.25 0.75 |" in (
        tmp_path / "s" / "results.md").read_text()
    assert names["gpt/budget-1"]["gate"]["pays"] is False and names["spanbert/budget-1"]["gate"]["pays"] is True
    assert "| gpt/budget-1 | 0.510 ± 0.010 | +0.000 ± 0.000 (not beyond 2 standard errors) |" in (
        tmp_path / "s" / "results.md").read_text()
    # The claims on the probes: on both tasks (no fine-tuning gate), paired by seed; GPT's probe does not beat its
    # control, so its claims get no verdict; SpanBERT's does, and its claim against BERT is judged.
    judged = {(claim["arm"], claim["against"], claim["task"]): claim for claim in results["probe_claims"]}
    assert {task for _, _, task in judged} == {"bbc-news", "bbc-names"}
    spans = judged[("spanbert", "bert", "bbc-names")]
    assert spans["difference"] == pytest.approx(-0.05) and spans["verdict"] == "reversed"
    with_gpt = [claim["verdict"] for (arm, against, _), claim in judged.items() if "gpt" in (arm, against)]
    assert with_gpt and set(with_gpt) == {"no verdict"}
    assert "The claims on the probes" in (tmp_path / "s" / "results.md").read_text()
    # BERT beats its control (random init); SpanBERT and GPT, which pretraining did not move here, do not, and so
    # every claim between them gets no verdict, whatever its difference.
    assert {name: record["control"]["bbc-names"]["gate"]["pays"] for name, record in results["arms"].items()} == {
        "bert": True, "spanbert": False, "gpt": False}
    assert {claim["verdict"] for claim in results["claims"]} == {"no verdict"}
    assert all("does not beat its control" in " ".join(claim["below_control"]) for claim in results["claims"])
    report = (tmp_path / "s" / "results.md").read_text()
    # At a glance: fine-tuned at the full budget (bbc-news empty), its control, then the probes at each share.
    assert "| gpt |  | 0.410 ± 0.010 |  | 0.417 ± 0.015 | 0.510 ± 0.010 | 0.510 ± 0.010 |" in report
    assert "Empty cells: not fine-tuned on bbc-news, where bert did not beat random initialisation" in report

    calls.clear()  # --all-tasks later: the same study fine-tunes every arm on bbc-news too, and nothing else again
    results = run.study(dataclasses.replace(options, all_tasks=True))
    assert sorted(calls) == sorted((key, "bbc-news", 16) for key in others + controls for _ in range(3))
    assert results["finetune_runs"] == 36 + 12  # the report counts the runs done before too
    assert all(len(row["scores"]) == 2 * (row["budget"] == 1) for row in results["rows"]) and "Empty cells" not in (
        tmp_path / "s" / "results.md").read_text()


def test_encoder_sizes_replace_a_presets_and_bad_ones_are_refused():
    from keras_bertology.models.registry import get_family
    from keras_bertology.pretraining.options import PretrainOptions

    sizes = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "intermediate_size": 64}
    options = PretrainOptions(model="electra", preset="electra-tiny", encoder=sizes)
    family = options.validate()
    config = options.backbone_config(family, vocab_size=10)
    assert {k: config[k] for k in sizes} == sizes and config["vocab_size"] == 10
    assert config["embedding_size"] == 32  # the preset's 64-wide embedding made as wide as the encoder
    big = dict(sizes, hidden_size=256, num_heads=4)
    assert PretrainOptions(model="electra", preset="electra-tiny", encoder=big).backbone_config(
        family)["embedding_size"] == 256
    assert PretrainOptions(model="albert", preset="albert-tiny", encoder=sizes).backbone_config(
        get_family("albert"))["embedding_size"] == 32
    assert "embedding_size" not in PretrainOptions(model="bert", preset="bert-tiny", encoder=sizes).backbone_config(
        get_family("bert"))
    for bad, words in (({"depth": 2}, "must be a dict of"), ({"num_layers": 0}, "at least 1"),
                       ({"hidden_size": 30, "num_heads": 4}, "not a multiple")):
        with pytest.raises(ConfigError, match=words):
            PretrainOptions(encoder=bad).validate()


def test_snapshots_must_end_a_logged_window():
    from keras_bertology.pretraining.options import PretrainOptions

    PretrainOptions(steps=600, snapshots=(300, 600)).validate()  # windows of 50 steps
    for bad in (310, 0, 650, "300"):
        with pytest.raises(ConfigError, match="not the end of a logged window"):
            PretrainOptions(steps=600, snapshots=(bad,)).validate()
