"""The README and docs/ stay true: links resolve, `bertology` examples parse, Python blocks run, cli.md is current."""

import re
import shlex
import textwrap
from pathlib import Path

from keras_bertology import cli_reference
from keras_bertology.cli import build_parser
from keras_bertology.models import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
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


def test_every_bertology_example_in_a_shell_block_parses():
    parser, failures, parsed = build_parser(), [], 0
    for page in PAGES:
        for line_number, _, body in _blocks(page, ("bash", "sh", "shell")):
            for command in body.replace("\\\n", " ").splitlines():
                words = shlex.split(command, comments=True)
                if words[:1] != ["bertology"] or any("[" in word or "|" in word for word in words):
                    continue  # not a bertology command, or a synopsis (RUN_DIR [--out DIR], bert|roberta)
                try:
                    parser.parse_args(words[1:])
                except SystemExit as stop:  # 0: an action that answers and ends, as --version
                    if stop.code:
                        failures.append(f"{_where(page, line_number)}: {command.strip()}")
                        continue
                parsed += 1
    assert parsed >= 15 and not failures, f"examples the parser refuses: {failures}"


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
        assert ("export" in hf) == (family.hf_exporter_path is not None), (
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
