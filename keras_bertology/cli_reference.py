"""docs/cli.md, the command-line reference, generated from `cli.build_parser()`.

`python -m keras_bertology.cli_reference` rewrites the page; tests/project/test_docs.py checks that it is current.
Help is rendered at a fixed width, so the page does not depend on the terminal it is made in.
"""

import argparse
import os
from pathlib import Path

from keras_bertology.cli import build_parser

WIDTH = 100
PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
COMMAND = "python -m keras_bertology.cli_reference"


def render():
    """The page: `bertology --help`, then each command's `--help`, in the parser's order."""
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse's formatter takes its width from the terminal size, read here
    try:
        parser = build_parser()
        commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        parts = [("bertology", parser)] + [(f"bertology {name}", sub) for name, sub in commands.choices.items()]
        sections = [f"## {title}\n\n```text\n{sub.format_help().rstrip()}\n```\n" for title, sub in parts]
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    header = (f"# Command-line reference\n\nEvery command's `--help`, generated from the argument parser by\n"
              f"`{COMMAND}`: do not edit by hand (`tests/project/test_docs.py` checks that it\n"
              "is current). What the commands do, task by task: [README.md](README.md).\n")
    return "\n".join([header] + sections)


if __name__ == "__main__":
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}")
