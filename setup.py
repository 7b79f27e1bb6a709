"""The build's metadata is in pyproject.toml; this shim keeps `python setup.py ...` and old tools working."""

from setuptools import setup

setup()
