"""Console scripts of the package: dfgnn-tune, dfgnn-db and dfgnn-graph.

The tools are native executables shipped in dfgnn/bin/ (they find libdfgnn one directory up); each
script replaces itself with its tool, passing the arguments on.
"""

import os
import sys
from pathlib import Path

from . import _nvrtc


def _run(name):
    exe = Path(__file__).resolve().parent / "bin" / name
    if not os.access(exe, os.X_OK):
        sys.exit(f"{name}: the executable {exe} is missing from this installation of dfgnn")
    _nvrtc.add_wheel_hint()
    os.execv(exe, [name, *sys.argv[1:]])


def tune():
    _run("dfgnn-tune")


def db():
    _run("dfgnn-db")


def graph():
    _run("dfgnn-graph")
