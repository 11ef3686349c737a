"""The public API and the package's shape: exported names, one-way imports, no cycles."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import mixshard

PACKAGE = Path(mixshard.__file__).parent


def test_exported_names_survive_importing_every_submodule():
    for info in pkgutil.walk_packages(mixshard.__path__, "mixshard."):
        importlib.import_module(info.name)
    for name in mixshard.__all__:
        value = getattr(mixshard, name)
        # no module but the namespaces exported on purpose (mixshard.masks)
        assert isinstance(value, type(mixshard)) == (name in mixshard._MODULES), name
    assert callable(mixshard.prefetch) and callable(mixshard.blend)
    assert callable(mixshard.pack) and callable(mixshard.loader) and callable(mixshard.verify)


def test_every_error_users_see_is_exported():
    from mixshard.core import errors

    raised = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.MixshardError)
    }
    assert raised >= {"ForkedError", "PackInterrupted", "WriteError", "MixshardError"}
    assert raised <= set(mixshard.__all__)
    assert all(getattr(mixshard, name) is getattr(errors, name) for name in raised)
    # what an error's `arguments` holds is exported with it
    assert mixshard.Arg is errors.Arg
    assert mixshard.MixshardError("give ", mixshard.Arg("resume", True)).arguments == (
        mixshard.Arg("resume", True),
    )


def test_the_design_doc_lists_every_exported_name_but_the_errors():
    text = (PACKAGE.parent / "docs" / "design.md").read_text()
    listed = text[text.index("re-exports the public") :][:600]
    names = [n for n in mixshard.__all__ if not n.endswith(("Error", "Interrupted"))]
    assert [n for n in names if f"`{n}`" not in listed] == []


def test_writing_side_does_not_import_torch():
    code = (
        "import sys, mixshard, mixshard.cli, mixshard.writing.packing, "
        "mixshard.reading.verifying, mixshard.cli.sheet; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _nodes(tree: ast.AST, annotations: bool):
    """Every node; without `annotations`, those under `if TYPE_CHECKING:` left out."""
    for node in ast.iter_child_nodes(tree):
        if (
            not annotations
            and isinstance(node, ast.If)
            and getattr(node.test, "id", "") == "TYPE_CHECKING"
        ):
            yield from (n for child in node.orelse for n in _nodes(child, annotations))
            continue
        yield node
        yield from _nodes(node, annotations)


def imports_of(path: Path, annotations: bool = False) -> set[str]:
    """Absolute names of what a module imports (relative imports resolved), at any depth;
    with `annotations`, the imports under `if TYPE_CHECKING:` too."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = set()
    for node in _nodes(ast.parse(path.read_text()), annotations):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.add(name)
            found |= {f"{name}.{a.name}" for a in node.names}
    return found


def graph() -> dict[str, set[str]]:
    """mixshard module -> the mixshard modules it imports, for annotations too (a cycle
    through an `if TYPE_CHECKING:` import is still two modules that need each other)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    edges = {}
    for name, path in modules.items():
        targets = {t for t in imports_of(path, annotations=True) if t in modules and t != name}
        edges[name] = targets
    return edges


def side(module: str) -> str:
    """`core`, `writing`, `reading`, `augment`, or the top-level module's own name."""
    return module.split(".")[1] if "." in module else module


def test_imports_run_one_way():
    allowed = {
        "core": {"core"},
        "writing": {"core", "writing"},
        "reading": {"core", "reading"},
        "augment": {"core", "reading", "augment"},
    }
    for module, targets in graph().items():
        if side(module) in allowed:
            wrong = {t for t in targets if side(t) not in allowed[side(module)]}
            assert not wrong, f"{module} imports {wrong}"


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(path + [nxt])}")
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in edges:
        if node not in state:
            visit(node, [node])


def test_heavy_dependencies_stay_on_their_side():
    for path in PACKAGE.rglob("*.py"):
        external = {name.split(".")[0] for name in imports_of(path)}
        rel = path.relative_to(PACKAGE).as_posix()
        if (rel.startswith(("core/", "writing/", "reading/pack/")) and rel != "core/device.py") or (
            rel
            in (
                "reading/verifying.py",
                "reading/preview.py",
                "reading/batches/order.py",
                "cli/sheet.py",
            )
        ):
            assert "torch" not in external, rel
        if rel.startswith(("core/", "augment/", "reading/")):
            assert "PIL" not in external, rel


# The rooms of `reading/` and the rooms each may import from (besides `core/`): bytes at
# offsets know nothing of orders, stores or URLs; nothing imports the modules at the top.
ROOMS = {
    "pack": {"pack"},
    "batches": {"pack", "batches"},
    "store": {"pack", "batches", "store"},
}


def test_the_rooms_of_reading_import_only_downwards():
    seen = set()
    for path in (PACKAGE / "reading").glob("*/*.py"):
        room = path.parent.name
        seen.add(room)
        for name in imports_of(path, annotations=True):
            parts = name.split(".")
            if parts[:2] == ["mixshard", "reading"] and len(parts) > 2:
                assert parts[2] in ROOMS[room], f"reading/{room}/{path.name} imports {name}"
            elif parts[0] == "mixshard":
                assert parts[1] == "core", f"reading/{room}/{path.name} imports {name}"
    assert seen == set(ROOMS)


# What the rest of mixshard may import of `reading/`: its entry points, never the rooms that
# read bytes (`pack/`, `store/`) or their readers; `batches.plan` for `mixshard inspect`, which
# shows the plan a default stream of a pack starts from. A pack is opened through its `Source`
# and read into a buffer through `buffers`.
READING_ENTRIES = {
    "buffers", "loading", "prefetcher", "preview", "source", "stream", "verifying",
    "batches.plan",
}  # fmt: skip
PACK_READERS = {"PackReader", "StoreFiles", "BlockCache", "read_rows", "ShardMaps", "FolderFiles"}


def test_outside_reading_packs_are_read_only_through_its_entry_points():
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("reading/"):
            continue
        for name in imports_of(path, annotations=True):
            parts = name.split(".")
            if parts[:2] != ["mixshard", "reading"] or len(parts) < 3:
                continue
            inner = ".".join(parts[2:])
            assert parts[-1] not in PACK_READERS, f"{rel} imports {name}"
            entry = any(inner == e or inner.startswith(e + ".") for e in READING_ENTRIES)
            assert entry, f"{rel} imports {name}"


# The rooms of `writing/`, each importing only the rooms before it (besides `core/`): what SRC
# holds knows no pixels, a file's pixels no plan, the plan no output, the output no runner;
# only `packing` (`pack`), above them all, imports every room.
WRITING_ROOMS = ("sources", "pixels", "plan", "out", "run")


def check_rooms(side: str, rooms: tuple[str, ...], also: set[str], top: set[str]) -> None:
    """Each module of `side`'s rooms imports only from its own room and those before it, and
    elsewhere in mixshard only from `also`; the side's own modules are `top` and the rooms."""
    seen = set()
    for path in (PACKAGE / side).glob("*/*.py"):
        room = path.parent.name
        seen.add(room)
        below = set(rooms[: rooms.index(room) + 1])
        for name in imports_of(path, annotations=True):
            parts = name.split(".")
            if parts[:2] == ["mixshard", side] and len(parts) > 2:
                assert parts[2] in below, f"{side}/{room}/{path.name} imports {name}"
            elif parts[0] == "mixshard":
                assert parts[1] in also, f"{side}/{room}/{path.name} imports {name}"
    assert seen == set(rooms)
    assert {p.name for p in (PACKAGE / side).glob("*.py")} == top


def test_the_rooms_of_writing_import_only_downwards():
    # nothing but the rooms and `pack` above them
    check_rooms("writing", WRITING_ROOMS, {"core"}, {"__init__.py", "packing.py"})


# The rooms of `augment/`, each importing only the rooms before it (besides `core/` and
# `reading/`): what the API is given knows no masks, masks no passes over pixels, the passes no
# draws, the draws no caches, the caches no state; only `Overlay` and `Backgrounds`, above them
# all, import every room.
AUGMENT_ROOMS = ("inputs", "masks", "kernels", "draws", "caches", "state")


def test_the_rooms_of_augment_import_only_downwards():
    # nothing but the rooms and the two front objects above them
    top = {"__init__.py", "overlay.py", "backgrounds.py"}
    check_rooms("augment", AUGMENT_ROOMS, {"core", "reading"}, top)


# The names with one meaning each (docs/design.md, "Module layout"): every class of the package
# named for a plan, a pool or a feed, and every module.
NAMED = {
    "Plan": {"ReadPlan", "CachePlan", "PackPlan", "PlannedClip"},
    "Pool": {"ImagePool", "ClipPool"},
    "Feed": {"BlockFeed", "FeedReads"},
}
NAMED_MODULES = {
    "plan": {"reading/batches/plan.py", "augment/caches/plan.py", "writing/plan/packplan.py"},
    "pool": {"augment/caches/imagepool.py", "augment/caches/clippool.py"},
    "feed": {"reading/batches/blockfeed.py"},
}


def test_plan_pool_and_feed_name_one_thing_each():
    classes: dict[str, set[str]] = {word: set() for word in NAMED}
    modules: dict[str, set[str]] = {word: set() for word in NAMED_MODULES}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        for word in modules:
            if word in path.stem and path.stem != "__init__":
                modules[word].add(rel)
        for node in ast.walk(ast.parse(path.read_text())):
            for word in classes:
                if isinstance(node, ast.ClassDef) and word.lower() in node.name.lower():
                    classes[word].add(node.name)
    modules["plan"] -= {"writing/plan/clipplan.py"}  # (the clips' PackPlan, in the plan room)
    assert classes == NAMED
    assert modules == NAMED_MODULES


def test_every_thread_is_started_by_core_jobs():
    # pools of threads (`ThreadPoolExecutor`) are shut down by their owners; a single thread
    # is a `Job` or a `JobThread`, whose errors reach the caller (docs/design.md)
    started = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "threading.Thread(" in path.read_text() and path.name != "jobs.py"
    ]
    assert started == []


def test_torch_cuda_is_named_in_the_device_seam_only():
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel != "core/device.py":
            assert "torch.cuda" not in path.read_text(), rel
    for path in (PACKAGE / "writing").rglob("*.py"):  # the seam imports torch
        assert "mixshard.core.device" not in imports_of(path), path


def test_each_side_imports_only_what_it_uses():
    """The package's public names load lazily: reading and blending import no PIL, and the
    writing side no torch."""
    code = (
        "import sys, mixshard.augment.kernels.ops, mixshard.reading.loading, "
        "mixshard.augment.overlay; "
        "print(sorted(m for m in ('PIL', 'mixshard.writing') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_HEAVY = (
    "torch", "webdataset", "tqdm", "multiprocessing", "concurrent.futures.process", "tarfile",
    "zipfile", "psutil", "socket", "mixshard.writing.out.storeout",
)  # fmt: skip


def test_a_quiet_folder_pack_starts_without_what_it_does_not_use(tmp_path):
    """`mixshard pack -q` of a folder with one worker: no torch or webdataset, no progress bar
    library, no process pool, no archive modules, no psutil; and numpy's OpenBLAS with one
    thread (each other one would spin at import). Without `-q` the same where stderr is no
    terminal (here a pipe): tqdm would show no bar there."""
    from helpers import noise

    noise(tmp_path / "src" / "a.jpg", size=(40, 30), seed=1)
    code = (
        "import sys; from mixshard.cli import main; sys.argv = ['mixshard', 'pack', "
        f"{str(tmp_path / 'src')!r}, sys.argv[1], '-q', '--workers', '1']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        f"heavy = {_HEAVY!r}\n"
        "import os; print(sorted(m for m in heavy if m in sys.modules), "
        "os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    # what a bare interpreter has already (under `make coverage`, its process hooks import
    # multiprocessing and socket in every child) is not pack's doing
    probe = f"import sys; print(sorted(m for m in {_HEAVY!r} if m in sys.modules))"
    bare = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True, text=True, check=True, env=env,
    ).stdout.strip()  # fmt: skip
    expected = sorted(set(eval(bare)) | {"tarfile"})  # noqa: S307 - our own list's repr
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out1")],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    # tarfile: the shard writer makes its USTAR headers with it
    assert out.stdout.startswith("Packed 1 images (0 skipped) into 1 shard")
    assert out.stdout.splitlines()[-1] == f"{expected} 1"
    env["OPENBLAS_NUM_THREADS"] = "3"  # the user's setting stays
    out = subprocess.run(
        [sys.executable, "-c", code.replace(", '-q'", ""), str(tmp_path / "out2")],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    assert out.stdout.splitlines()[-1] == f"{expected} 3"


def test_a_pack_at_a_terminal_shows_its_progress_bar(tmp_path):
    """Where stderr is a terminal (a pseudo-terminal here) the bar is drawn, to the last image;
    `-q` draws none."""
    from helpers import noise, on_terminal

    for i in range(3):
        noise(tmp_path / "src" / f"{i}.jpg", size=(40, 30), seed=i)

    def drawn(*flags: str) -> str:
        cmd = [sys.executable, "-m", "mixshard", "pack", str(tmp_path / "src")]
        cmd += [str(tmp_path / f"out{len(flags)}"), "--workers", "1", *flags]
        return on_terminal(cmd, timeout=120, check=True)

    bar = drawn()
    assert "3/3" in bar and "img/s" in bar
    assert "img/s" not in drawn("-q")


def test_a_pack_without_stderr_packs(tmp_path):
    """A process with no stderr at all (`sys.stderr` None, as under pythonw or a daemon that
    closed it): no bar, and the pack is written."""
    from helpers import noise

    noise(tmp_path / "src" / "a.jpg", size=(40, 30), seed=1)
    code = (
        "import sys; sys.stderr = None; from mixshard.cli import main; sys.argv = ['mixshard', "
        f"'pack', {str(tmp_path / 'src')!r}, {str(tmp_path / 'out')!r}, '--workers', '1']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.startswith("Packed 1 images (0 skipped) into 1 shard")
    assert (tmp_path / "out" / "index.json").is_file()


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body, its docstring left out."""
    body = node.body
    has_doc = isinstance(body[0], ast.Expr) and isinstance(
        getattr(body[0], "value", None), ast.Constant
    )
    first = body[1] if has_doc and len(body) > 1 else body[0]
    return node.end_lineno - first.lineno + 1


def test_no_function_over_50_lines():
    root = PACKAGE.parent
    for path in [*PACKAGE.rglob("*.py"), *(root / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert body_lines(node) <= 50, f"{path.name}: {node.name}"


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="only CI must have built them")
def test_ci_built_every_compiled_module():
    """The C modules are optional at install (the code falls back without a compiler), so a
    failed build would only show as skipped tests: on CI, where a compiler is, it fails here."""
    from mixshard.augment.kernels import fused
    from mixshard.reading.pack import mapped
    from mixshard.writing.pixels import resample

    assert fused._lerp is not None, "mixshard/augment/kernels/_lerp.c was not built"
    assert mapped._mapped is not None, "mixshard/reading/pack/_mapped.c was not built"
    assert resample._resize is not None, "mixshard/writing/pixels/_resize.c was not built"
