"""The project's metadata, extras and tool settings are in pyproject.toml."""

from setuptools import setup

setup()
