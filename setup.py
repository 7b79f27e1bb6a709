"""keras-bertology: pretrain, convert and export BERT-family models in Keras 3."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def _requirements(name):
    lines = (HERE / "requirements" / name).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


setup(
    name="keras-bertology",
    version="0.1.0",
    description="BERT-family pretraining, checkpoint import and SavedModel export in Keras 3",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_bertology", "keras_bertology.*"]),
    install_requires=_requirements("base.txt"),
    extras_require={"test": _requirements("test.txt")},
    entry_points={"console_scripts": ["bertology=keras_bertology.cli:main"]},
)
