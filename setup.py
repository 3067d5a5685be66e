"""Only what pyproject.toml cannot say:

- the packages: the folders ``engine/``, ``fusefs/``, ``mount/`` and ``pipeline/`` (and their
  subpackages) are installed as ``rmqfs.engine``, ``rmqfs.fusefs``, ... (a package-dir mapping),
  so no generic top-level ``engine`` or ``mount`` lands in site-packages; ``rmqfs`` itself is a
  namespace package. pyproject.toml's ``packages.find`` cannot prefix the names it finds.
- the compiled decoder, an extension module built by cffi from engine/read/_kernel_build.py
  (``cffi_modules`` is cffi's setuptools keyword; there is no pyproject.toml table for it).

Everything else about the project is in pyproject.toml.
"""

from setuptools import find_packages, setup

FOLDERS = ("engine", "fusefs", "mount", "pipeline")

setup(
    packages=[
        f"rmqfs.{p}"
        for p in find_packages(include=[f"{f}{s}" for f in FOLDERS for s in ("", ".*")])
    ],
    package_dir={f"rmqfs.{f}": f for f in FOLDERS},
    cffi_modules=["engine/read/_kernel_build.py:ffibuilder"],
)
