"""The Python clients that docs/serving.md shows, run as written in a new process that never imports TensorFlow
(what a serving client is), with a few lines of the test's own appended to save what it served."""

import re
import subprocess
import sys
from pathlib import Path

SERVING_DOCS = Path(__file__).parents[2] / "docs" / "serving.md"
NO_TENSORFLOW = "import sys\nassert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"


def serving_docs_client(start, end):
    """The first Python block of docs/serving.md between the headings `start` and `end`."""
    page = SERVING_DOCS.read_text()
    section = page[page.index(start):page.index(end)]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run_serving_docs_client(start, end, save, folder):
    """`serving_docs_client(start, end)`, then a check that TensorFlow stayed out, then `save` (code), run in
    `folder`; fails the test with the client's error."""
    client = serving_docs_client(start, end) + NO_TENSORFLOW + save
    done = subprocess.run([sys.executable, "-c", client], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
