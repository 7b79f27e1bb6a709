"""The README and docs/ stay true: links resolve, `bertology` commands pass the CLI's checks, Python blocks run, cli.md
is current."""

import json
import os
import re
import shlex
import textwrap
from pathlib import Path

from keras_bertology import cli_reference
from keras_bertology.cli import build_parser
from keras_bertology.models import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
DOCS_PAGES = [page for page in PAGES if page.parent != ROOT]
# A fenced block: its indent, its language, its body (up to a closing fence at the same indent).
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
NOT_RUN = re.compile(r"<!-- not run: \S.* -->")


def _blocks(page, languages):
    """(line number, previous non-blank line, dedented body) of each fenced block in `languages`."""
    text = page.read_text(encoding="utf-8")
    for match in FENCE.finditer(text):
        if match.group("lang") in languages:
            before = [line for line in text[:match.start()].splitlines() if line.strip()]
            yield (text.count("\n", 0, match.start()) + 1, before[-1].strip() if before else "",
                   textwrap.dedent(match.group("body")))


def _where(page, line):
    return f"{page.relative_to(ROOT)}:{line}"


def test_the_cli_reference_is_current():
    page = cli_reference.PAGE
    assert page.read_text(encoding="utf-8") == cli_reference.render(), (
        f"docs/cli.md is out of date with the argument parser: run `{cli_reference.COMMAND}` and commit it")


def test_every_relative_link_points_to_an_existing_file():
    broken, checked = [], 0
    for page in PAGES:
        prose = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(prose):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            checked += 1
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert checked > 50 and not broken, f"links to missing files: {broken}"


def test_every_model_synopsis_lists_every_registered_family():
    """A `--model a|b|...` synopsis in a shell block names exactly the registered families (a family added
    to the registry must be added to the synopses)."""
    synopses = [(page, line, alternatives) for page in PAGES for line, _, body in _blocks(page, ("bash", "sh", "shell"))
                for alternatives in re.findall(r"--model ((?:[\w-]+\|)+[\w-]+)", body)]
    wrong = [_where(page, line) for page, line, alternatives in synopses
             if sorted(alternatives.split("|")) != sorted(FAMILIES)]
    assert len(synopses) >= 2 and not wrong, f"--model synopses that miss or add families: {wrong}"


def test_the_readme_families_table_names_each_family_its_presets_and_hf_export():
    """One row per family, linking its page; its presets (`bert-tiny`, `-mini`: the family's prefix cut) and
    "export" in the Hugging Face column exactly when the family has an exporter."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Families\n", 1)[1].split("\n## ", 1)[0]
    rows = {re.search(r"\(docs/families/([\w-]+)\.md\)", row).group(1): row.split(" | ")
            for row in section.splitlines() if row.startswith("| [")}
    assert sorted(rows) == sorted(FAMILIES)
    for name, (_, _, presets, hf, _) in rows.items():
        family = FAMILIES[name]
        listed = re.findall(r"`([\w.-]+)`", presets)
        full = [preset if not preset.startswith("-") else listed[0].rsplit("-", 1)[0] + preset for preset in listed]
        assert sorted(full) == sorted(family.presets), name
        assert ("export" in hf) == (family.conversion.hf_exporter_path is not None), (
            f"README families table, {name}: the Hugging Face column must say export exactly when the family has "
            "an exporter")


def test_every_docs_python_block_is_run_or_says_why_not():
    blocks = [(page, line, before) for page in DOCS_PAGES for line, before, _ in _blocks(page, ("python",))]
    unexplained = [_where(page, line) for page, line, before in blocks
                   if before.startswith("<!--") and not NOT_RUN.fullmatch(before)]
    assert blocks and not unexplained, f"a marker must read `<!-- not run: reason -->`: {unexplained}"


def test_every_unmarked_python_block_in_docs_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = 0
    for page in DOCS_PAGES:
        for line, before, body in _blocks(page, ("python",)):
            if NOT_RUN.fullmatch(before):
                continue
            exec(compile(body, _where(page, line), "exec"), {"__name__": "__docs__"})
            ran += 1
    assert ran >= 1


def test_the_readme_study_tables_quote_the_committed_study_which_its_json_renders():
    """The README's study tables are lines of the committed results.md, and results.md is what the report
    code renders from the committed results.json (so no number is typed by hand)."""
    import json

    from keras_bertology.study.report import markdown

    committed = ROOT / "benchmarks" / "results" / "study_tiny"
    report = (committed / "results.md").read_text(encoding="utf-8")
    assert markdown(json.loads((committed / "results.json").read_text(encoding="utf-8"))) == report
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## The objective study\n", 1)[1]
    rows = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("| ")]
    assert len(rows) >= 12 and [row for row in rows if row not in report.splitlines()] == []


# Runs (and prepared data) that commands of the docs take but no command of the docs nor a Makefile recipe
# makes, each with why the commands on it go unchecked against it. Every other run a command names is made.
UNMADE_RUNS = {}
CONVERTED_SEQ_LEN = 128  # `convert` without --seq-len: 128, or the checkpoint's positions when fewer


def _documented_commands():
    """(where, words after `bertology`) of each command of the pages' shell blocks (synopses left out) and of
    the Makefile's recipes (its variables expanded)."""
    commands = []
    for page in PAGES:
        for line_number, _, body in _blocks(page, ("bash", "sh", "shell")):
            for command in body.replace("\\\n", " ").splitlines():
                words = shlex.split(command, comments=True)
                if words[:1] == ["bertology"] and not any("[" in word or "|" in word for word in words):
                    commands.append((_where(page, line_number), words[1:]))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    variables = dict(re.findall(r"^(\w+) :?= (.*)$", makefile, re.M))
    for line_number, line in enumerate(makefile.splitlines(), 1):
        if line.startswith("\t") and "/bertology " in line:
            for _ in range(5):
                line = re.sub(r"\$\((\w+)\)", lambda name: variables.get(name.group(1), name.group(0)), line)
            commands.append((f"Makefile:{line_number}", shlex.split(line.split("/bertology ", 1)[1])))
    return commands


def _made(commands_args):
    """{folder: (command, its parsed flags, its options or None)} of the runs and prepared data the commands
    write; a converted run's options are None."""
    from keras_bertology import cli
    from keras_bertology.prepare.options import PrepareOptions
    from keras_bertology.pretraining.options import PretrainOptions

    made = {}
    for _, args in commands_args:
        if args.command == "pretrain" and args.out:
            made.setdefault(os.path.normpath(args.out), ("pretrain", args, cli._options(args, PretrainOptions)))
        elif args.command == "convert":
            made[os.path.normpath(args.out)] = ("convert", args, None)
        elif args.command == "prepare":
            made[os.path.normpath(args.out)] = ("prepare", args, cli._options(args, PrepareOptions))
    return made


def _seq_len(made, folder):
    command, args, options = made[folder]
    return options.seq_len if options is not None else args.seq_len or CONVERTED_SEQ_LEN


def _cheap_checks(args, made):
    """The CLI's checks of one parsed command that need no training: its options' `validate`, its length
    buckets against the sequence length of the run it exports, and a --resume against the options of the
    run it resumes. Returns the runs it takes that nothing makes."""
    from keras_bertology import cli
    from keras_bertology.finetune.options import FinetuneOptions
    from keras_bertology.flag_ranges import check_length_buckets
    from keras_bertology.prepare.options import PrepareOptions
    from keras_bertology.engine.checkpoints import recorded_options
    from keras_bertology.pretraining.options import PretrainOptions

    taken = {"export": [args.run_dir] if args.command == "export" else [],
             "finetune": [getattr(args, "from_dir", None)],
             "pretrain": [getattr(args, name, None) for name in ("init_from", "family_teacher", "data")]}
    unmade = [os.path.normpath(run) for run in taken.get(args.command, []) if run and "://" not in run
              and os.path.normpath(run) not in made]
    if unmade:
        return unmade
    if args.command == "pretrain":
        options = cli._options(args, PretrainOptions)
        options.validate()
        resumed = made.get(os.path.normpath(args.out)) if args.resume and args.out else None
        if resumed and resumed[0] == "pretrain":
            first = recorded_options(resumed[2])
            changed = sorted(key for key, value in recorded_options(options).items() if first.get(key) != value)
            if changed:
                raise AssertionError(f"--resume of {args.out} with other options than the command that made it: "
                                     f"{', '.join(changed)}")
    elif args.command == "prepare":
        cli._options(args, PrepareOptions).validate()
    elif args.command == "study":
        cli._study_options(args).validate()
    elif args.command == "finetune":
        FinetuneOptions(**{name: value for name, value in vars(args).items() if name != "command"}).validate()
        run = os.path.normpath(args.from_dir)
        if run in made:
            check_length_buckets(args.length_buckets, args.seq_len or _seq_len(made, run))
    elif args.command == "export":
        check_length_buckets(args.length_buckets, _seq_len(made, os.path.normpath(args.run_dir)))
    return []


def test_every_documented_command_passes_the_cli_checks_against_the_runs_the_docs_make(tmp_path, monkeypatch):
    """Each `bertology` command of the docs and README shell blocks, and of the Makefile, parses and passes the
    CLI's cheap checks (`_cheap_checks`), with the sequence lengths and options of the runs the docs make
    (`make run`: runs/bert-tiny-shakespeare at 64 tokens). Nothing trains; input files the reader brings
    (a gazetteer) are stood in for by empty files, and each run a command starts from by a run.json."""
    from keras_bertology.errors import BertologyError

    monkeypatch.chdir(tmp_path)
    parser, parsed, failures, skipped = build_parser(), [], [], []
    for where, words in _documented_commands():
        try:
            parsed.append((where, parser.parse_args(words)))
        except SystemExit as stop:
            if stop.code:
                failures.append(f"{where}: bertology {' '.join(words)}: refused by the parser")
    made = _made(parsed)
    for folder, (command, args, options) in made.items():
        if command != "prepare":
            (tmp_path / folder / "model").mkdir(parents=True, exist_ok=True)
            (tmp_path / folder / "model" / "run.json").write_text(json.dumps(
                {"family": options.model if options else None, "seq_len": _seq_len(made, folder)}))
    for where, args in parsed:
        for name in ("gazetteer", "phrases"):
            if getattr(args, name, None):
                (tmp_path / getattr(args, name)).touch()
        try:
            unmade = _cheap_checks(args, made)
        except (BertologyError, AssertionError) as error:
            failures.append(f"{where}: bertology {args.command}: {error}")
            continue
        for run in unmade:
            if run in UNMADE_RUNS:
                skipped.append((where, run, UNMADE_RUNS[run]))
            else:
                failures.append(f"{where}: takes {run}, which no command of the docs nor the Makefile makes "
                                "(make it, or name it in UNMADE_RUNS with why)")
    assert len(parsed) >= 40 and "runs/bert-tiny-shakespeare" in made
    assert not failures, "\n".join(failures)
    assert {run for _, run, _ in skipped} == set(UNMADE_RUNS), "UNMADE_RUNS names a run no command takes"
