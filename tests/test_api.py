"""The public API: every exported name is what it says, whatever was imported before."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import mixshard


def test_exported_names_survive_importing_every_submodule():
    for info in pkgutil.iter_modules(mixshard.__path__):
        importlib.import_module(f"mixshard.{info.name}")
    for name in mixshard.__all__:
        value = getattr(mixshard, name)
        assert not isinstance(value, types.ModuleType), f"mixshard.{name} is a module"
    assert callable(mixshard.prefetch) and callable(mixshard.blend)
    assert callable(mixshard.pack) and callable(mixshard.loader)


def test_writing_side_does_not_import_torch():
    code = "import sys, mixshard, mixshard.cli, mixshard.pack; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
