"""Every command and code block of the README and of docs/*.md is run here, or names the test
that mirrors it.

Each fenced block is preceded by `<!-- check: KIND ... -->`:
  run            bash lines are run as written (in order, in a scratch folder holding small
                 procedural `places365_standard/` and `val2017/` sources), python blocks are
                 executed there with MIXSHARD_DATA=data;
  make T...      the Makefile has those targets (their behaviour: test_makefile.py);
  mirror F::T    the test function T in F does the same thing against local servers;
  extras         each `pip install -e '.[X]'` names an extra pyproject.toml declares;
  output         the shown `$ mixshard ...` output is reproduced exactly;
  figure         a text diagram, nothing to run.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_flat, noise

from mixshard.testdata import make_image_folder

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}
TEXTS = {"README.md": README, **{f"docs/{name}": text for name, text in DOCS.items()}}
BLOCK = re.compile(
    r"<!-- check: (?P<check>[^>]*?) -->\n```(?P<lang>\w*)\n(?P<body>.*?)```", re.DOTALL
)


def blocks(text: str | None = None) -> list[tuple[str, str, str]]:
    """The checked blocks of one text, or of the README and then every docs/*.md."""
    texts = [text] if text is not None else list(TEXTS.values())
    return [(m["check"].strip(), m["lang"], m["body"]) for t in texts for m in BLOCK.finditer(t)]


def test_every_block_says_how_it_is_checked():
    assert {"benchmarks.md", "design.md", "troubleshooting.md"} <= set(DOCS)
    for name, text in TEXTS.items():
        fences = text.count("```") // 2
        assert len(blocks(text)) == fences, f"a code block of {name} lacks its check line"
    for check, _, _ in blocks():
        assert check.split()[0] in ("run", "make", "mirror", "extras", "output", "figure"), check


def mixshard(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mixshard", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    for split, per_class in (("train", 6), ("val", 2)):
        make_image_folder(
            root / "places365_standard" / split, classes=3, per_class=per_class, seed=1, max_side=96
        )
    make_flat(root / "val2017", n=260)  # enough for a batch of 256
    noise(root / "demo" / "frame.png", size=(84, 84))  # as make demo writes it
    return root


def test_run_blocks_in_order(scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    monkeypatch.setenv("MIXSHARD_DATA", "data")
    ran = 0
    for check, lang, body in blocks():
        if check != "run":
            continue
        if lang == "bash":
            for line in body.splitlines():
                command = line.split("#", 1)[0].strip()
                if not command:
                    continue
                words = shlex.split(command)
                assert words[0] == "mixshard", command
                res = mixshard(words[1:], scratch)
                assert res.returncode == 0, (command, res.stdout, res.stderr)
                ran += 1
        else:
            assert lang == "python"
            exec(compile(body, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102
            ran += 1
    assert ran == 15  # (the 168 px recipe packs from Python now, one block)
    assert (scratch / "grid.png").exists() and (scratch / "blended.png").exists()


def test_make_blocks_name_real_targets():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
    for check, _, body in blocks():
        if check.startswith("make"):
            for target in check.split()[1:]:
                assert target in targets, target
            for line in body.splitlines():
                words = line.split("#", 1)[0].split()
                if words and words[0] == "make":
                    assert words[1] in targets, line


def test_mirrored_blocks_point_at_tests_that_exist():
    mirrors = [check.split()[1] for check, _, _ in blocks() if check.startswith("mirror")]
    assert mirrors
    for ref in mirrors:
        file, name = ref.split("::")
        assert f"def {name}(" in (ROOT / file).read_text(), ref


def test_extras_exist():
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+) = ", section, re.MULTILINE))
    for check, _, body in blocks():
        if check == "extras":
            for name in re.findall(r"\.\[(\w+)\]", body):
                assert name in extras, name


def test_shown_output_is_what_the_command_prints(tmp_path):
    shown = [body for check, _, body in blocks() if check == "output"]
    assert shown
    make_image_folder(tmp_path / "demo" / "src", classes=5, per_class=60, seed=0)
    assert mixshard(["pack", "demo/src", "demo/pack", "-q"], tmp_path).returncode == 0
    for body in shown:
        command, *expected = body.rstrip("\n").splitlines()
        assert command.startswith("$ mixshard ")
        res = mixshard(shlex.split(command[2:])[1:], tmp_path)
        assert res.returncode == 0
        assert res.stdout.splitlines() == expected


# Error messages a user can meet, each triggered by a test elsewhere; the README's
# troubleshooting section must explain every one.
ERRORS = [
    "source folder not found",
    "source must be a folder of images, got a file",
    "no images found in",
    "no readable image in",
    "holds both loose images",
    "has no subfolders with images",
    "is not empty; pass --resume",
    "holds files mixshard did not write",
    "exists and is not a folder",
    "cannot write to output folder",
    "is in use by another mixshard pack",
    "No space left on device",
    "Read-only file system",
    "--resume and --overwrite exclude each other",
    "holds an interrupted pack of another source",
    "holds a finished pack made with other options",
    "needs --crop random",
    "exceeds --shard-size",
    "--strict:",
    "a decode worker process died",
    "Interrupted.",
    "Invalid value for '--part'",
    "planned shards are not written yet",
    "packing on Ray needs Ray",
    "cannot reach the Ray cluster",
    "is not visible on Ray node",
    "bad shard file(s) in",
    "no index.json in",
    "a pack is being written there",
    "pack folder not found",
    "is not valid JSON",
    "is not a mixshard manifest",
    "is inconsistent",
    "not a regular file",
    "is shard format version",
    "cannot read the observation image",
    "cannot write grid.png",
    "is missing",
    "(truncated or altered)",
    "no .npy header where index.json says",
    "changed after the pack was opened",
    "ends early",
    "cannot reach",
    "is longer than the",
    "does not answer byte ranges",
    "are no longer read",
    "every shard of",
    "every shard read was bad",
    "fewer than world_size x batch_size",
    "a loader worker process died",
    "no room for a pool",
    "no room for a pool of clips",
    "plays clips, but",
    "set MIXSHARD_DATA",
    "no packed dataset",
    "state_dict was saved with",
    "is not empty and holds no mixshard pack",
    "is inside the source folder",
    "is inside the output folder",
    "is a mixshard pack (it holds index.json)",
    "is a folder of mixshard packs",
    "are dataset splits",
    "not enough free space for this pack",
    "it starts with a literal ~",
    "still holds the earlier pack, unchanged",
    "an image folder, not a pack",
    "a folder of N pack(s), not a pack",
    "is a shard file of the pack",
    "an interrupted pack; finish it with",
    "is a pack itself",
    "name the file .png, .jpg, .jpeg or .webp",
    "would be SRC itself",
    "starts with a literal ~ that was not expanded",
    "holds one folder",
    "holds no folder",
    "is truncated or damaged",
    "the archive was cut short or replaced while packing",
    "MD5 of the download is",
    "mixshard cannot read or write",
    "reading object stores needs fsspec",
    "does not exist; create it first",
    "holds objects mixshard did not write",
    "was denied",
    "did not answer within",
    "in the block cache is a symbolic link",
    "the disk of cache_dir",
    "cannot use the block cache under",
    "4 attempts in 3.5 s",
    "the server's body ended early",
    "dataset must be the name of a pack folder",
    "decode worker processes",
    "the Ray task of shard",
    "is not as its sha256 in index.json says",
    "more than a manifest may be",
    "cannot read shard",
    "come from bad blocks",
    "decompression bomb",
    "empty file (0 bytes)",
    "corrupt or truncated",
    "Interrupted as the pack finished",
    "Interrupted as mixshard exited",
    "which leads to no folder",
    "vanished during the pack",
    "probe stopped:",
    "a frame over PIL's limit of",
]


def test_troubleshooting_covers_every_error():
    text = DOCS["troubleshooting.md"]
    section = text[text.index("## Troubleshooting") :]
    missing = [e for e in ERRORS if e not in section]
    assert not missing


def test_pack_option_table_matches_the_help():
    """The README's `mixshard pack` option table lists exactly the command's options, with
    their defaults (as sqlite-utils checks its docs against the code)."""
    from mixshard.cli import cli

    section = README[README.index("### `mixshard pack SRC OUT`") :]
    section = section[: section.index("\n\n", section.index("| option |"))]
    documented = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if cells[0].startswith("`-"):
            for flag in re.findall(r"`(--[\w-]+)", cells[0]):
                documented[flag] = cells[1]
    command = cli.commands["pack"]
    options = {
        opt: p
        for p in command.params
        if isinstance(p, __import__("click").Option)
        for opt in p.opts
        if opt.startswith("--") and opt != "--help"
    }
    assert set(documented) == set(options)
    for flag, param in options.items():
        if param.is_flag or param.default is None:
            assert documented[flag] in ("off", "the CPUs this process may use"), flag
        else:
            assert documented[flag] == str(param.default), flag


def test_the_readme_is_short_and_says_how_to_start():
    assert len(README.splitlines()) <= 350
    assert "source .venv/bin/activate" in README
    assert "![what make demo writes](docs/overlay.png)" in README


def test_links_to_docs_name_files_that_exist():
    for name, text in TEXTS.items():
        base = ROOT if name == "README.md" else ROOT / "docs"
        for target in re.findall(r"\]\(((?:docs/)?[\w.-]+\.(?:md|png))(?:#[\w-]+)?\)", text):
            assert (base / target).exists(), (name, target)


def test_the_overlay_signature_lists_every_argument():
    import inspect

    import mixshard

    shown = re.search(r"`Overlay\((source, \*,.*?)\)`", README, re.DOTALL)
    assert shown
    names = [a.split("=")[0].strip() for a in shown[1].replace("\n", " ").split(",")]
    names = [n for n in names if n not in ("*", "")]
    params = [p for p in inspect.signature(mixshard.Overlay).parameters if p != "self"]
    assert names == params
