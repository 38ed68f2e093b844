"""The files aifabric ships with its code: P4 programs and their compiled outputs (P4Info, BMv2
JSON), the lab experiments, topologies and policies, and the northbound proto.

They are read through :mod:`importlib.resources` from the packages that hold them, so the same
lookups work from a checkout and from an installed wheel:

==========================================  ===============================================
package data                                in a checkout
==========================================  ===============================================
``controller/_data/p4/...``                 a symlink to the top-level ``p4/``
``mininet_labs/policies/...``               a symlink to the top-level ``policies/``
``mininet_labs/experiments``, ``topologies``  the directories themselves
``controller/northbound/aifabric.proto``    the file itself
==========================================  ===============================================

The build (``python -m build``) follows the symlinks and copies the files into the sdist and the
wheel (``[tool.setuptools.package-data]`` in pyproject.toml), so an installed aifabric has no
symlink and no checkout behind it; ``tests/test_install.py`` builds the wheel, installs it in a
fresh virtual environment and runs the program from there.

Installed packages live in directories (pip unpacks wheels), so a resource is a real file:
:func:`package_file` returns a :class:`pathlib.Path` that finsy, p4c's readers and the lab runner
open by name. A zipped import (zipapp, egg) is not supported and raises :class:`ResourceError`.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


class ResourceError(RuntimeError):
    """The package's data is not on the file system (a zipped import)."""


def package_file(package: str, *parts: str) -> Path:
    """The path of ``parts`` inside ``package``'s data (it need not exist: callers check).

    Raises
    ------
    ResourceError
        ``package`` is imported from something other than a directory.
    """
    root = files(package)
    if not isinstance(root, Path):
        raise ResourceError(f"{package} is imported from {root!r}, not a directory: aifabric "
                            "reads its P4 programs and lab files by path; install it unpacked "
                            "(pip install aifabric)")
    return root.joinpath(*parts)


def p4_dir(program: str) -> Path:
    """The directory of a shipped P4 program (``fabric``, ``aggregation``): its source, and
    ``build/`` with p4c's committed outputs."""
    return package_file("controller", "_data", "p4", program)


def experiments_dir() -> Path:
    """The shipped lab experiments (``aifabric lab list``)."""
    return package_file("mininet_labs", "experiments")


def topologies_dir() -> Path:
    """The shipped topologies the experiments use."""
    return package_file("mininet_labs", "topologies")


def policies_dir() -> Path:
    """The shipped policies the experiments use."""
    return package_file("mininet_labs", "policies")
