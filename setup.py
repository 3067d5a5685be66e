"""Only what pyproject.toml cannot say: the compiled decoder, an extension module built by cffi
from engine/read/_kernel_build.py (``cffi_modules`` is cffi's setuptools keyword; there is no
pyproject.toml table for it). Everything else about the project is in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["engine/read/_kernel_build.py:ffibuilder"])
