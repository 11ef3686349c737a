"""The arguments library messages name, as data: Python's spelling from `str()`, the command
line's own flags from its parameters; every argument `pack` can be told about is one of its
options, and every choice the command line offers is its `Literal`'s values."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from typing import get_args

import click
import pytest
from helpers import make_flat, run

from mixshard.cli import cli
from mixshard.core.choices import ClipList, Crop, Labels, Resample
from mixshard.core.errors import (
    OVERWRITE,
    RESUME,
    Arg,
    ArgumentError,
    MixshardError,
    OutputError,
    PackInterrupted,
    SkippedImagesError,
)

ROOT = Path(__file__).resolve().parents[1]

# every argument a library message can name to `pack`, as the command line spells it
SPELLED = {
    RESUME: "--resume",
    OVERWRITE: "--overwrite",
    Arg("strict"): "--strict",
    Arg("strict", True): "--strict",
    Arg("workers", 1): "--workers 1",
    Arg("labels"): "--labels",
    Arg("labels", "folders"): "--labels folders",
    Arg("labels", "none"): "--labels none",
    Arg("within"): "--within",
    Arg("within", "a b/it's"): "--within 'a b/it'\"'\"'s'",
    Arg("within", "."): "--within .",
    Arg("ray"): "--ray",
    Arg("clips", True): "--clips",
    Arg("crop", "full"): "--crop full",
    Arg("crop", "random"): "--crop random",
    Arg("variants", 2): "--variants 2",
    Arg("shard_size", 3): "--shard-size 3",
    Arg("resume"): "--resume",
    Arg("overwrite"): "--overwrite",
    Arg("finish"): "--finish",
    Arg("part"): "--part",
    Arg("every"): "--every",
    Arg("max_frames"): "--max-frames",
    Arg("shuffle_clips"): "--shuffle-clips",
    Arg("clip_list"): "--clip-list",
}


def raised_names() -> set[str]:
    """The names of every `Arg(...)` the library builds for a pack (writing/ and core/); each
    is a string literal, so this finds them all."""
    names = set()
    for room in ("writing", "core"):
        for path in sorted((ROOT / "mixshard" / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Arg":
                    first = node.args[0] if node.args else None
                    assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                        f"{path}:{node.lineno}: Arg's name is not a string literal"
                    )
                    names.add(first.value)
    return names


def test_every_argument_the_library_names_is_an_option_of_pack():
    names = raised_names()
    options = {p.name for p in cli.commands["pack"].params if isinstance(p, click.Option)}
    assert names >= {"resume", "overwrite", "strict", "workers", "labels", "within", "ray"}
    assert names <= options, f"not an option of pack: {sorted(names - options)}"
    assert names == {arg.name for arg in SPELLED}  # each one's spelling is checked below


def test_python_spells_arguments_as_python():
    exc = OutputError("OUT is not empty; pass ", RESUME, " or ", Arg("within", "a b"), ".")
    assert str(exc) == "OUT is not empty; pass resume=True or within='a b'."
    assert exc.arguments == (RESUME, Arg("within", "a b"))
    assert str(ArgumentError(Arg("every"), " applies to clips")) == "every applies to clips"
    assert str(MixshardError("plain")) == "plain" and MixshardError("plain").arguments == ()


def test_the_arguments_survive_pickling():
    # a decode worker's or a Ray task's error reaches the pack process pickled
    exc = pickle.loads(pickle.dumps(SkippedImagesError(RESUME, ": x", skipped=[{"path": "a"}])))
    assert exc.args == (RESUME, ": x") and exc.skipped == [{"path": "a"}]
    assert pickle.loads(pickle.dumps(OutputError("a ", OVERWRITE))).arguments == (OVERWRITE,)


def _pack_raising(monkeypatch, exc: Exception) -> click.testing.Result:
    from mixshard.writing import packing

    def failing(*args, **kwargs):
        raise exc

    monkeypatch.setattr(packing, "pack", failing)
    return run("pack", "src", "out", "--quiet")


@pytest.mark.parametrize("arg", list(SPELLED), ids=str)
def test_pack_spells_each_argument_as_its_flag(monkeypatch, arg):
    res = _pack_raising(monkeypatch, OutputError("pass ", arg, " to fix it"))
    assert res.exit_code == 1
    assert res.output == f"Error: pass {SPELLED[arg]} to fix it\n"
    res = _pack_raising(monkeypatch, ArgumentError(arg, " needs ", Arg("clips", True)))
    assert res.exit_code == 2
    assert res.output.endswith(f"\nError: {SPELLED[arg]} needs --clips\n")


def test_a_resumable_error_that_names_no_resume_gets_the_flag(monkeypatch):
    res = _pack_raising(monkeypatch, PackInterrupted("the Ray task of shard 3 failed"))
    assert res.output == (
        "Error: the Ray task of shard 3 failed; rerun the same command with --resume to continue\n"
    )
    res = _pack_raising(monkeypatch, PackInterrupted("pack again with ", RESUME))
    assert res.output == "Error: pack again with --resume\n"


def test_a_name_the_command_lacks_keeps_pythons_spelling(monkeypatch):
    res = _pack_raising(monkeypatch, OutputError("pass ", Arg("mode", "r")))
    assert res.output == "Error: pass mode='r'\n"


def test_a_folder_that_is_not_empty_names_both_flags(tmp_path):
    make_flat(tmp_path / "src", n=2)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.json").write_text("{}")
    res = run("pack", tmp_path / "src", tmp_path / "out", "--size", "8", "--quiet")
    assert res.exit_code == 1
    assert res.output == (
        f"Error: output folder {tmp_path / 'out'} is not empty; pass --resume to finish an "
        "interrupted pack there or --overwrite to replace it\n"
    )


def test_within_on_a_folder_is_quoted_for_the_shell(tmp_path):
    make_flat(tmp_path / "src", n=2)
    res = run("pack", tmp_path / "src", tmp_path / "out", "--within", "a b", "--quiet")
    assert res.exit_code == 2
    assert res.output.endswith(
        f"\nError: --within 'a b' picks a folder inside an archive, but SRC {tmp_path / 'src'} "
        f"is a folder: pass the folder itself as SRC ({tmp_path / 'src' / 'a b'}) and no "
        "--within\n"
    )


def test_every_choice_of_the_command_line_is_its_literals_values():
    literals = {"crop": Crop, "resample": Resample, "labels": Labels, "clip_list": ClipList}
    choices = {
        (name, p.name): tuple(p.type.choices)
        for name, command in cli.commands.items()
        for p in command.params
        if isinstance(p.type, click.Choice)
    }
    assert choices == {("pack", name): get_args(t) for name, t in literals.items()}


def test_no_choice_list_is_written_out_in_the_command_line():
    # the values are listed once, as Literal types: no tuple, list or text of the CLI lists two
    for path in sorted((ROOT / "mixshard" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for literal in (Crop, Resample, Labels, ClipList):
                values = get_args(literal)
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    listed = [e.value for e in node.elts if getattr(e, "value", None) in values]
                    assert len(listed) < 2, f"{path.name}:{node.lineno} lists {listed}"
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    pairs = [f"{a}, {b}" for a in values for b in values if a != b]
                    listed = [p for p in pairs if p in node.value]
                    assert not listed, f"{path.name}:{node.lineno} lists {listed}"


def test_a_flag_set_false_is_its_off_switch_or_pythons_spelling(monkeypatch):
    res = _pack_raising(monkeypatch, OutputError("pass ", Arg("strict", False)))
    assert res.output == "Error: pass strict=False\n"  # never `--strict`, which turns it on
