"""`bertology study --batch-sizes`: equal samples per size, a rate grid judged on held-out perplexity only,
the chosen rates' seeds, the gate, the verdict, resume and bad input."""

import json
import math

import pytest

from keras_bertology.errors import ConfigError, TrainingError
from keras_bertology.study import rate_grid, run, steps
from keras_bertology.study.arms import ARMS, SCALES
from keras_bertology.study.batch_report import overall, trend
from keras_bertology.study.options import StudyOptions

ROBERTA = next(arm for arm in ARMS if arm.name == "roberta")


def test_every_size_sees_the_same_samples_at_square_root_scaled_rates():
    settings = rate_grid.grid(ROBERTA, SCALES["tiny"], (512, 32, 128))
    assert [(s.batch_size, s.accumulate, s.steps) for s in settings[::3]] == [
        (32, 1, 600), (128, 4, 150), (512, 16, 38)]
    # Equal samples within the rounding of the largest size's updates (half an update of 512 in 19,200).
    assert all(abs(s.samples - 600 * 32) <= 256 for s in settings)
    # RoBERTa's rate (1e-3 at its batch of 32) times sqrt(B / 32), times 1/2, 1 and 2.
    assert [s.rate for s in settings] == [5e-4, 1e-3, 2e-3, 1e-3, 2e-3, 4e-3, 2e-3, 4e-3, 8e-3]
    assert len({s.name for s in settings}) == len(settings)


def _pretrained(perplexities):
    return {name: {"perplexity": value} for name, value in perplexities.items()}


def test_the_rate_of_lowest_held_out_perplexity_is_chosen_and_diverged_runs_are_passed_over():
    settings = rate_grid.grid(ROBERTA, SCALES["smoke"], (8, 16))
    values = dict(zip([s.name for s in settings], [300.0, 250.0, None, 400.0, 420.0, 390.0]))
    best = rate_grid.chosen(settings, _pretrained(values))
    assert {size: setting.rate for size, setting in best.items()} == {8: settings[1].rate, 16: settings[5].rate}
    lost = dict(values, **{s.name: None for s in settings[3:]})
    with pytest.raises(TrainingError, match="every rate of the grid diverged at batch size 16"):
        rate_grid.chosen(settings, _pretrained(lost))


def _verdict(verdict):
    return {"verdict": verdict}


@pytest.mark.parametrize("perplexity, scores, expected", [
    ("reproduced", ["reproduced", "reproduced"], "holds"),
    ("reproduced", [], "holds"),  # no task where pretraining pays: perplexity alone
    ("undecided", ["reproduced"], "undecided"),
    ("reversed", ["reproduced"], "does not hold"),
    ("reproduced", ["reproduced", "not reproduced"], "does not hold"),
])
def test_the_trend_holds_only_with_lower_perplexity_and_no_task_worse(perplexity, scores, expected):
    assert trend(_verdict(perplexity), {f"task{i}": _verdict(v) for i, v in enumerate(scores)}) == expected


def test_the_axis_holds_only_where_every_larger_size_does():
    assert overall([{"trend": "holds"}, {"trend": "holds"}]) == "holds"
    assert overall([{"trend": "holds"}, {"trend": "undecided"}]) == "undecided"
    assert overall([{"trend": "undecided"}, {"trend": "does not hold"}]) == "does not hold"


@pytest.mark.parametrize("changes, words", [
    ({"batch_sizes": (8,)}, "two or more different sizes"),
    ({"batch_sizes": (8, 8)}, "two or more different sizes"),
    ({"batch_sizes": (8, 12)}, "--batch-sizes 12: each size must be a multiple of the scale's batch of 8"),
    ({"batch_sizes": (4, 8)}, "--batch-sizes 4"),
    ({"batch_sizes": (8, 0)}, "--batch-sizes 0: each size must be a whole number from 1 to"),
    ({"batch_sizes": (8, 104)}, "more than the 96 samples"),
    ({"batch_sizes": (8, 16), "arms": ("bert", "roberta")}, "studies one arm"),
])
def test_bad_batch_sizes_are_refused_before_anything_runs(changes, words):
    with pytest.raises(ConfigError, match=words):
        StudyOptions(scale="smoke", **changes).validate()


def test_an_arm_whose_rows_carry_memory_is_refused_before_the_study_folder_is_made(tmp_path):
    with pytest.raises(ConfigError, match="--batch-sizes cannot study the xlnet arm: --accumulate does not apply"):
        run.study(StudyOptions(scale="smoke", batch_sizes=(8, 16), arms=("xlnet",), out=str(tmp_path / "s")))
    assert not (tmp_path / "s").exists()


def test_the_axis_studies_roberta_unless_told_otherwise_and_the_objective_study_every_arm():
    assert StudyOptions(batch_sizes=(32, 64)).arms == ("roberta",)
    assert StudyOptions(batch_sizes=(32, 64), arms=("electra",)).arms == ("electra",)
    assert len(StudyOptions().arms) == len(ARMS)


def test_the_flow_pretrains_the_grid_then_the_chosen_rates_seeds_then_fine_tunes_them(tmp_path, monkeypatch):
    """The study with its training faked at `pretrain` and `_finetune`: held-out perplexity falls with the
    batch and with the middle rate; every run's options are the axis's; the scores are the same for every
    size (a wash, "at least" holds), so the trend holds; a second call runs nothing."""
    import keras_bertology.pretraining.pretrain as pretraining

    runs, finetunes = [], []
    scale = SCALES["smoke"]

    def pretrain(options):
        runs.append(options)
        factor = options.learning_rate / (1e-3 * math.sqrt(options.batch_size / 8))
        perplexity = 500.0 - 20 * options.batch_size / 8 - (30 if abs(factor - 1) < 0.01 else 0) + 2 * options.seed
        return {"eval": [{"step": options.steps, "objectives": {"mlm": {"loss": math.log(perplexity), "accuracy": 0.1,
                                                                        "perplexity": perplexity}}}],
                "objectives": {"mlm": {"chance": {"loss": math.log(270.0)}}}, "steps": options.steps,
                "train_seconds": 1.0}

    def finetune(scale, key, run_dir, random_init, task, labels, seed, out):
        finetunes.append((key.split(f"/{task}/")[0], run_dir.name, random_init))
        score = 0.3 + 0.01 * seed + (0.0 if random_init else 0.1)
        return {"metric": "f1", "score": score, "dev": score, "seconds": 1.0, "wall_seconds": 1.0}

    def arm_flops(options, scale, arm, out):
        (out / "tokenizers" / arm.name).mkdir(parents=True)
        (out / "tokenizers" / arm.name / "vocab.json").write_text("{}")
        return {"average": 1e9, "stages": [[1.0, 1e9]]}

    monkeypatch.setattr(pretraining, "pretrain", pretrain)
    monkeypatch.setattr(steps, "_finetune", finetune)
    monkeypatch.setattr(steps, "_arm_flops", arm_flops)
    options = StudyOptions(scale="smoke", seeds=3, out=str(tmp_path / "s"), batch_sizes=(8, 16, 32),
                           tasks=("bbc-names",), verbose=0)
    results = run.study(options)

    grid, repeats = runs[:9], runs[9:]
    assert [(o.batch_size, o.accumulate, o.steps) for o in grid[::3]] == [(8, 1, 12), (16, 2, 6), (32, 4, 3)]
    assert all(o.batch_size * o.steps == scale.reference_steps * scale.batch_size for o in runs)
    assert all(o.eval_every == o.steps and o.seq_len == scale.seq_len for o in runs)  # held out at the end
    assert all(o.seed == 0 for o in grid)
    # The middle rate won at every size: only it pretrains again, with the other seed (2 at smoke).
    assert sorted((o.batch_size, o.learning_rate, o.seed) for o in repeats) == [
        (size, grid[3 * i + 1].learning_rate, 1) for i, size in enumerate((8, 16, 32))]
    assert finetunes[:6] == [("roberta-batch-8", "roberta-batch-8-rate-0.001", False)] * 3 + [
        ("random-init", "roberta-batch-8-rate-0.001", True)] * 3
    assert sorted(set(finetunes[6:])) == [("roberta-batch-16", "roberta-batch-16-rate-0.00141", False),
                                          ("roberta-batch-32", "roberta-batch-32-rate-0.002", False)]
    assert [row["perplexity"]["mean"] for row in results["rows"]] == [451.0, 431.0, 391.0]
    assert [c["perplexity"]["difference"] for c in results["comparisons"]] == [20.0, 60.0]
    assert [c["trend"] for c in results["comparisons"]] == ["holds", "holds"] and results["verdict"] == "holds"
    report = (tmp_path / "s" / "results.md").read_text()
    assert "**0.00141: 430.00**" in report and "| 32 | 4 | 0.002 | 391.00 ± 1.00 |" in report
    assert "trend (a larger batch at a tuned rate gives lower held-out perplexity and equal or better downstream " \
           "scores at equal compute) holds here" in report
    assert (tmp_path / "s" / "batch_sizes.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "s" / "results.json").read_text())["verdict"] == "holds"

    runs.clear(), finetunes.clear()
    again = run.study(options)
    assert runs == [] and finetunes == [] and again["verdict"] == "holds"


# `make test-all`: the flow test above checks the plan and the report on faked runs, test_large_batch.py a run
# that accumulates and evaluates held-out documents, and test_study.py's smoke study the study's runs end to end.
@pytest.mark.extended
def test_a_smoke_batch_study_accumulates_and_evaluates_held_out_documents(tmp_path, monkeypatch):
    """The axis with its runs real: each size's runs accumulate and score held-out documents at their end,
    and the report reads them. One rate a size (the grid's logic is the flow test's), two seeds."""
    monkeypatch.setattr(rate_grid, "RATE_FACTORS", (1.0,))
    out = tmp_path / "s"
    results = run.study(StudyOptions(scale="smoke", batch_sizes=(8, 16), tasks=("bbc-names",), seeds=2,
                                     vocab_size=1000, out=str(out), all_tasks=True, verbose=0))
    assert [row["batch_size"] for row in results["rows"]] == [8, 16] and results["arm"] == "roberta"
    assert [(point["batch_size"], point["rate"]) for point in results["grid"]] == [(8, 1e-3), (16, 0.00141)]
    for point in results["grid"]:
        metrics = json.loads((out / "pretrain" / f"roberta-batch-{point['batch_size']}-rate-{point['rate']:g}"
                              / "metrics.json").read_text())
        assert (metrics["batch_size"], metrics["accumulate"], metrics["steps"]) == (
            point["batch_size"], point["batch_size"] // 8, 96 // point["batch_size"])
        assert metrics["learning_rate"] == point["rate"] and metrics["eval"][-1]["step"] == metrics["steps"]
        assert metrics["eval"][-1]["objectives"]["mlm"]["perplexity"] == pytest.approx(point["perplexity"])
    assert all(len(row["scores"]) == 1 for row in results["rows"])  # --all-tasks: every size fine-tuned
    assert results["rows"][0]["perplexity"]["n"] == 2 and results["finetune_runs"] == 3 * 2
    assert results["rows"][0]["unigram_perplexity"] > 1 and "| 16 | 2 | 0.00141 | " in (out / "results.md").read_text()


def test_bad_batch_sizes_on_the_command_line_get_one_line_and_no_folder(tmp_path, capsys):
    from keras_bertology import cli

    for sizes, words in (("8,12", "multiple of the scale's batch of 8"), ("8,x", "'x' is not a whole number")):
        try:
            status = cli.main(["study", "--scale", "smoke", "--batch-sizes", sizes, "--out", str(tmp_path / "s")])
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code
        error = capsys.readouterr().err
        assert status == 2 and error.count("\n") == 1 and words in error and "Traceback" not in error
    assert not (tmp_path / "s").exists()


def test_a_best_rate_at_an_end_of_the_grid_adds_the_rate_beyond_it_twice_at_most():
    settings = rate_grid.grid(ROBERTA, SCALES["smoke"], (8, 16))
    lowest_best = dict(zip([s.name for s in settings], [300.0, 310.0, 320.0, 420.0, 410.0, 400.0]))
    added = rate_grid.widened(settings, _pretrained(lowest_best))
    assert [(s.batch_size, s.rate) for s in added] == [(8, 2.5e-4), (16, float(f"{2 * settings[5].rate:.3g}"))]
    # The first widening won again at batch 8 (lower still); batch 16's best is now inside its rates.
    wider = settings + added
    lowest_best.update({added[0].name: 290.0, added[1].name: 405.0})
    again = rate_grid.widened(wider, _pretrained(lowest_best))
    assert [(s.batch_size, s.rate) for s in again] == [(8, 1.25e-4)]
    lowest_best[again[0].name] = 280.0  # at the end again, but batch 8 has had its two
    assert rate_grid.widened(wider + again, _pretrained(lowest_best)) == []
    assert rate_grid.widened(settings, _pretrained(dict(zip(lowest_best, [310.0, 300.0, 320.0] * 2)))) == []
