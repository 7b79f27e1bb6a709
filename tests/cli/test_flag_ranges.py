"""Every numeric flag of every command has a range (flag_ranges.py): out of it, the parser refuses the value
with one line before anything starts, the Python API refuses it with a ConfigError, and its ends are
accepted. And a fine-tuning run whose loss stops being finite ends at that step, with nothing written.

The flags are read from the parser itself, so a numeric flag added without a range fails here.
"""

import argparse
import math
import re

import pytest

from keras_bertology import cli
from keras_bertology.errors import ConfigError, TrainingError
from keras_bertology.finetune.options import FinetuneOptions
from keras_bertology.flag_ranges import Range
from keras_bertology.models import FAMILIES
from keras_bertology.prepare.options import PrepareOptions
from keras_bertology.probe_encoder import ProbeOptions
from keras_bertology.pretraining.options import PretrainOptions

HUGE = 10**22


def _base_argv(command, tmp):
    """The command with its required flags (and every output) in `tmp`: what a range check adds to."""
    return {"pretrain": ["pretrain", "--out", f"{tmp}/run", "--export", f"{tmp}/export"],
            "prepare": ["prepare", "--out", f"{tmp}/data"],
            "finetune": ["finetune", "--task", "bbc-news", "--from", f"{tmp}/run", "--out", f"{tmp}/ft",
                         "--export", f"{tmp}/export"],
            "study": ["study", "--out", f"{tmp}/study"],
            "convert": ["convert", "--from-hf", f"{tmp}/hf", "--out", f"{tmp}/run"],
            "export": ["export", f"{tmp}/run", "--out", f"{tmp}/export"],
            "probe": ["probe", "--from", f"{tmp}/run", "--task", "bbc-news", "--out", f"{tmp}/probes"]}.get(command, [command])


def _commands():
    parser = cli.build_parser()
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices


def _numeric_flags():
    """(command, flag, dest, Range or None) of every flag that takes a number: parsed by a `type=`, or
    with a number for its default."""
    found = []
    for command, subparser in _commands().items():
        for action in subparser._actions:
            numeric_default = isinstance(action.default, (int, float)) and not isinstance(action.default, bool)
            if action.type is not None or numeric_default:
                bounds = getattr(action.type, "__self__", None)
                found.append((command, action.option_strings[0], action.dest,
                              bounds if isinstance(bounds, Range) else None))
    return found


FLAGS = _numeric_flags()


def _is_list(command, flag):
    """Whether the flag takes comma-separated numbers (--length-buckets 16,32), each in its range."""
    return getattr(_commands()[command]._option_string_actions[flag].type, "__name__", "") == "parse_list"

IDS = [f"{command} {flag}" for command, flag, _, _ in FLAGS]


def _outside(bounds):
    """Values just past each end, far past them, zero and negatives where refused, NaN and infinities."""
    values = {"nan", "inf", "-inf", str(HUGE), str(-HUGE)}
    if bounds.kind is int:
        values |= {str(bounds.low - 1), str(bounds.high + 1), "-1"}
    else:
        values |= {"1e22", "-1e22", "-1",
                   str(bounds.high) if "high" in bounds.open else repr(math.nextafter(bounds.high, math.inf)),
                   str(bounds.low) if "low" in bounds.open else repr(math.nextafter(bounds.low, -math.inf))}
    if not bounds.accepts(0):
        values.add("0")
    return sorted(values)


def _ends(bounds):
    """The smallest and largest value accepted."""
    if bounds.kind is int:
        return [bounds.low, bounds.high]
    return [math.nextafter(bounds.low, math.inf) if "low" in bounds.open else bounds.low,
            math.nextafter(bounds.high, -math.inf) if "high" in bounds.open else bounds.high]


def test_the_table_covers_every_command_and_family():
    flags = {(command, flag) for command, flag, _, _ in FLAGS}
    assert {command for command, _ in flags} == {"pretrain", "prepare", "finetune", "study", "convert", "export",
                                                  "probe"}
    family_flags = {option.flag for family in FAMILIES.values() for option in family.options if option.kind is not str}
    assert family_flags <= {flag for command, flag in flags if command == "pretrain"}
    assert family_flags <= {flag for command, flag in flags if command == "prepare"}
    assert {("pretrain", "--steps"), ("prepare", "--shards"), ("prepare", "--workers"), ("finetune", "--seed"),
            ("finetune", "--epochs"), ("study", "--seeds"), ("convert", "--seq-len"),
            ("pretrain", "--mem-len")} <= flags


@pytest.mark.parametrize("command, flag, dest, bounds", FLAGS, ids=IDS)
def test_every_numeric_flag_has_a_range_shown_in_its_help(command, flag, dest, bounds):
    assert bounds is not None, f"{command} {flag} parses its value without a range (see flag_ranges.py)"
    assert bounds.high < HUGE
    action = _commands()[command]._option_string_actions[flag]
    assert str(bounds) in action.help


def _must_not_run(args):
    raise AssertionError(f"{args.command} started with {vars(args)}")


@pytest.mark.parametrize("command, flag, dest, bounds", FLAGS, ids=IDS)
def test_values_out_of_range_are_refused_as_parsed(command, flag, dest, bounds, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "COMMANDS", dict.fromkeys(cli.COMMANDS, _must_not_run))  # a value let through fails fast
    for value in _outside(bounds):
        try:
            status = cli.main(_base_argv(command, tmp_path) + [f"{flag}={value}"])
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert status == 2, (value, captured.err)
        assert len(lines) == 1 and lines[0].startswith(f"bertology: error: argument {flag}: "), (value, captured.err)
        assert f"{value!r} is not {bounds}" in lines[0]
        assert "Traceback" not in captured.err + captured.out
        assert not list(tmp_path.iterdir()), f"{command} {flag}={value} left files behind"


@pytest.mark.parametrize("command, flag, dest, bounds", FLAGS, ids=IDS)
def test_the_ends_of_each_range_are_accepted(command, flag, dest, bounds, tmp_path):
    parser = cli.build_parser()
    for value in _ends(bounds):
        args = parser.parse_args(_base_argv(command, tmp_path) + [f"{flag}={value!r}"])
        assert getattr(args, dest) == ((value,) if _is_list(command, flag) else value)


def _api_options(command, args):
    """The options object the command builds from its parsed flags."""
    if command == "pretrain":
        return cli._options(args, PretrainOptions)
    if command == "prepare":
        return cli._options(args, PrepareOptions)
    if command == "finetune":
        return FinetuneOptions(**{name: value for name, value in vars(args).items() if name != "command"})
    if command == "probe":
        return ProbeOptions(**{name: value for name, value in vars(args).items() if name != "command"})
    return cli._study_options(args)


def _family_of(flag):
    """(--model, --preset) that take a family's own flag, or none."""
    for family in FAMILIES.values():
        if flag in {option.flag for option in family.options}:
            return ["--model", family.name, "--preset", next(iter(family.presets))]
    return []


API_FLAGS = [case for case in FLAGS if case[0] not in ("convert", "export")]  # no options class
# What the options classes say of one number of a list flag out of its range (the list's own checks follow).
LIST_MESSAGES = {"--length-buckets": "each bucket must be a whole number of tokens from 1 to",
                 "--batch-sizes": "each size must be a whole number from 1 to"}


@pytest.mark.parametrize("command, flag, dest, bounds", API_FLAGS, ids=[f"{c} {f}" for c, f, _, _ in API_FLAGS])
def test_the_python_api_refuses_what_the_flags_refuse(command, flag, dest, bounds, tmp_path):
    args = cli.build_parser().parse_args(_base_argv(command, tmp_path) + _family_of(flag))
    _api_options(command, args).validate()  # the defaults pass
    values = [HUGE, -HUGE, -1, math.nan, math.inf, bounds.high + (1 if bounds.kind is int else bounds.high)]
    values += [1e22, 2.5] if bounds.kind is float else [bounds.low - 1, 2.5, True]
    for value in values:
        if bounds.accepts(value):
            continue
        if _is_list(command, flag):  # each number of the list, checked with the sequence length
            setattr(args, dest, (value,))
            message = f"{flag} {value!r}: " + LIST_MESSAGES[flag]
        else:
            setattr(args, dest, value)
            message = f"{flag} must be {bounds}"
        with pytest.raises(ConfigError, match=re.escape(message)):
            _api_options(command, args).validate()


# fine-tuning's stop at a non-finite loss

@pytest.fixture(scope="module")
def sentences():
    from keras_bertology.data.corpus import default_corpus_paths, read_corpus

    return [s for document in read_corpus(default_corpus_paths()[:1]) for s in document][:1000]


def test_a_diverging_fine_tuning_stops_at_its_first_bad_step_and_writes_nothing(tmp_path, sentences, monkeypatch,
                                                                               capsys):
    from finetune_material import make_run, user_folders

    from keras_bertology.finetune import run as finetune_run

    # --learning-rate stops at 10, where a loss stays finite: the optimizer gets 1e29 times the flag's rate.
    adamw = finetune_run.bert_adamw
    monkeypatch.setattr(finetune_run, "bert_adamw", lambda rate, *args, **kwargs: adamw(rate * 1e29, *args, **kwargs))
    run = make_run(tmp_path / "run", "bert", sentences)
    folder = user_folders(tmp_path / "data")["pairs"]
    out, export = tmp_path / "ft", tmp_path / "ft-export"
    status = cli.main(["finetune", "--task", str(folder), "--from", str(run), "--epochs", "3", "--batch-size", "16",
                       "--learning-rate", "10", "--warmup", "0", "--out", str(out), "--export", str(export)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2 and len(lines) == 1, captured.err
    stopped = re.fullmatch(r"bertology: error: the loss became (nan|inf) at step (\d+); training stopped and "
                           r"nothing was written\. Fine-tune with a lower --learning-rate \(this run's was 10\)",
                           lines[0])
    assert stopped, lines[0]
    assert int(stopped[2]) <= 3, "the step after the first update diverges: training stops there, not at an epoch end"
    assert "epoch 1: dev" not in captured.out
    written = {path.name for path in out.rglob("*")} if out.exists() else set()
    assert not written & {"results.json", "results.md", "model.keras", "training_curve.png"}, written
    assert not export.exists() or not list(export.iterdir())


def test_the_step_stop_names_the_step_across_epochs():
    from keras_bertology.engine.callbacks import StopOnNonFiniteStepLoss

    stop = StopOnNonFiniteStepLoss(5, advice="Lower it.")
    stop.on_epoch_begin(0)
    stop.on_train_batch_end(4, {"loss": 1.0})
    stop.on_epoch_begin(1)
    with pytest.raises(TrainingError, match=r"^the loss became inf at step 8; training stopped and nothing was "
                                            r"written\. Lower it\.$"):
        stop.on_train_batch_end(2, {"loss": math.inf})
