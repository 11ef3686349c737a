"""Backgrounds on real simulator renders: a step with and without the background layer, on
every simulator that is installed (docs/simulators.md).

    python scripts/bench_simulators.py [--quick] [--envs 4] [--size 96] [--steps 20] \\
        [--rounds 5] [--threads 1] [--only genesis ...]

Each simulator runs in a process of its own (they bring their own renderers and thread pools),
from a pack of procedural backgrounds made at the render size. "RGB step" is a step as a user
without backgrounds pays it: the simulator's step and its RGB render, as a torch tensor.
"+ ids" adds the ids a mask needs (in the same render pass where the simulator can);
"+ background" adds the keep mask from them, `Backgrounds.step` and the composite. ManiSkill3
renders RGB and ids at once: its rows are the raw env's step and `ManiSkillBackgrounds`' step.
The variants take turns step by step; the table gives the median step of each, the background
layer's ratio to the step with ids, and the layer alone on one frame.
Simulators that are not installed, or cannot render here, are listed with the reason.

Writes bench-out/bench_simulators.json. First runs compile kernels (MuJoCo Warp and MJX about
a minute, Genesis about two), cached for the next.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import OUT, machine, table

SIMULATORS = ("dm_control", "mujoco_warp", "mjx", "genesis", "newton", "maniskill3")
# the distribution whose version a row names
DISTRIBUTION = {
    "dm_control": "dm-control",
    "mujoco_warp": "mujoco-warp",
    "mjx": "mujoco-mjx",
    "genesis": "genesis-world",
    "newton": "newton",
    "maniskill3": "mani-skill",
}

# a floor and falling shapes, for the MuJoCo renderers (MuJoCo Warp and MJX take it as is)
SCENE_XML = """<mujoco><worldbody><light pos="0 0 3" dir="0 0 -1"/>
<camera name="cam" pos="0 -1.6 1.1" xyaxes="1 0 0 0 0.57 0.82"/>
<geom name="floor" type="plane" size="3 3 .1" rgba=".5 .5 .5 1"/>
<body pos="-.3 0 .5"><freejoint/><geom type="box" size=".1 .1 .1" rgba="1 .2 .2 1"/></body>
<body pos=".3 0 .7"><freejoint/><geom type="sphere" size=".12" rgba=".2 .8 .2 1"/></body>
<body pos="0 .3 .9"><freejoint/><geom type="capsule" size=".05 .15" rgba=".2 .2 1 1"/></body>
</worldbody></mujoco>"""


# -- the layer, in the layout the simulators give ----------------------------------------------


def keep_mask(seg: Any, *, background: list[int]) -> Any:
    """`(N, H, W, 1)` bool: true where the id is none of `background`."""
    import torch

    from mixshard import masks

    if "layout" in inspect.signature(masks.from_segmentation).parameters:
        return masks.from_segmentation(seg, background=background, layout="NHWC")
    # until layout="NHWC" (issue 47 §2): the same mask by hand
    ids = torch.tensor(background, dtype=seg.dtype, device=seg.device)
    return ~torch.isin(seg, ids)


def paste(bg: Any, rgb: Any, keep: Any) -> Any:
    """`bg.composite` of channels-last `(N, H, W, 3)` rgb behind `keep` `(N, H, W, 1)`."""
    import torch

    if "layout" in inspect.signature(bg.composite).parameters:
        return bg.composite(rgb, keep, layout="NHWC")
    # until layout="NHWC" (issue 47 §1): NCHW views of channels-last tensors (RGBA: the
    # alpha copied as it is)
    out = torch.empty_like(rgb)
    if rgb.shape[-1] == 4:
        out[..., 3] = rgb[..., 3]
    nchw = (0, 3, 1, 2)
    rgb3, out3 = rgb[..., :3].permute(nchw), out[..., :3].permute(nchw)
    bg.composite(rgb3, keep.permute(nchw), out=out3)
    return out


def measure(steps: dict[str, Callable[[], Any] | None], args: Any) -> dict:
    """Median seconds of one step of each variant (`rgb`: the RGB render alone, `ids`: with the
    ids a mask needs, `with`: and the background layer; None where a simulator has no such
    variant), the variants taking turns step by step (a load spike of the busy machine then
    falls on all of them alike), after a warm-up of each."""
    ran = {name: fn for name, fn in steps.items() if fn is not None}
    for fn in ran.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in ran}
    for _ in range(args.rounds * args.steps):
        for name, fn in ran.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def backgrounds(args: Any, device: Any = "cpu") -> Any:
    import mixshard

    return mixshard.Backgrounds(args.pack, args.envs, frames=1, device=device, seed=1)


def with_layer(frame: Callable[[], tuple], background: list[int], bg: Any) -> Callable[[], Any]:
    """A step that renders with ids and pastes the backgrounds behind them."""

    def step() -> Any:
        rgb, seg = frame()
        bg.step()
        return paste(bg, rgb, keep_mask(seg, background=background))

    return step


def layer_only(frame: Callable[[], tuple], background: list[int], bg: Any, args: Any) -> float:
    """Median seconds of the layer alone (mask, `Backgrounds.step`, composite) on one frame."""
    rgb, seg = frame()
    times = []
    for _ in range(max(5, args.steps)):
        t0 = time.perf_counter()
        bg.step()
        paste(bg, rgb, keep_mask(seg, background=background))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# -- the simulators (each in its own process) --------------------------------------------------


def run_dm_control(args: Any) -> dict:
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    import numpy as np
    import torch
    from dm_control import suite

    envs = [suite.load("cheetah", "run", task_kwargs={"random": i}) for i in range(args.envs)]
    for env in envs:
        env.reset()
    action = np.zeros(envs[0].action_spec().shape)
    model = envs[0].physics.model
    floors = np.flatnonzero(model.geom_type == 0).tolist()  # mjGEOM_PLANE: the ground
    size = args.size

    def rgb_only() -> Any:
        for env in envs:
            env.step(action)
        return torch.from_numpy(np.stack([e.physics.render(size, size, camera_id=0) for e in envs]))

    def frame() -> tuple:
        rgb = rgb_only()  # the ids are a second render pass in dm_control
        ids = [e.physics.render(size, size, camera_id=0, segmentation=True) for e in envs]
        return rgb, torch.from_numpy(np.stack(ids)[..., :1])

    bg, background = backgrounds(args), [-1, *floors]  # the skybox and the ground
    row = measure({"rgb": rgb_only, "ids": frame, "with": with_layer(frame, background, bg)}, args)
    row["layer"] = layer_only(frame, background, bg, args)
    row["render"] = "per env (H, W, 3) uint8 numpy; ids a 2nd pass (H, W, 2) int32, sky -1"
    return row


def mujoco_warp_frame(args: Any) -> tuple[Callable[[], Any], Callable[[], tuple]]:
    """MuJoCo Warp on Warp's CPU device: (a step + RGB, a step + RGB and ids) as torch."""
    import mujoco
    import mujoco_warp as mjw
    import torch
    import warp as wp

    wp.config.quiet = True
    m = mujoco.MjModel.from_xml_string(SCENE_XML)
    n, s = args.envs, args.size
    with wp.ScopedDevice("cpu"):
        mw, dw = mjw.put_model(m), mjw.put_data(m, mujoco.MjData(m), nworld=n)
        rc = mjw.create_render_context(
            m, nworld=n, cam_res=(s, s), render_rgb=True, render_depth=False, render_seg=True
        )
        rgb = wp.zeros((n, s, s), dtype=wp.vec3)
        seg = wp.zeros((n, s, s), dtype=wp.vec2i)
    rgb_t, seg_t = torch.from_dlpack(rgb), torch.from_dlpack(seg)  # views, made once

    def rgb_only() -> Any:
        with wp.ScopedDevice("cpu"):
            mjw.step(mw, dw)
            mjw.render(mw, dw, rc)
            mjw.get_rgb(rc, 0, rgb)
        return rgb_t.mul(255)  # float in [0, 1]; mixshard takes 0..255

    def frame() -> tuple:
        out = rgb_only()
        with wp.ScopedDevice("cpu"):
            mjw.get_segmentation(rc, 0, seg)  # from the same render pass
        return out, seg_t[..., :1]

    return rgb_only, frame


def run_mujoco_warp(args: Any) -> dict:
    rgb_only, frame = mujoco_warp_frame(args)
    bg = backgrounds(args)
    row = measure({"rgb": rgb_only, "ids": frame, "with": with_layer(frame, [-1, 0], bg)}, args)
    row["layer"] = layer_only(frame, [-1, 0], bg, args)
    row["render"] = "(N, H, W) vec3 float32 0..1 (Warp) -> (N, H, W, 3); ids vec2i, sky -1"
    return row


def mjx_frame(args: Any) -> tuple[Callable[[], Any], Callable[[], tuple]]:
    """MJX (Warp implementation) on JAX's CPU device: JAX arrays, jitted."""
    os.environ.setdefault("MJX_WARP_ENABLED", "true")
    import jax
    import jax.numpy as jp
    import mujoco
    from mujoco import mjx

    m = mujoco.MjModel.from_xml_string(SCENE_XML)
    n, s = args.envs, args.size
    mx = mjx.put_model(m, impl="warp")
    state = {"d": jax.jit(jax.vmap(lambda i: mjx.make_data(m, impl="warp")))(jp.arange(n))}
    rc = mjx.create_render_context(
        m, nworld=n, cam_res=(s, s), render_rgb=True, render_depth=True, render_seg=True
    )
    step = jax.jit(jax.vmap(mjx.step, in_axes=(None, 0)))
    refit = jax.jit(jax.vmap(mjx.refit_bvh, in_axes=(None, 0, None)))
    render = jax.jit(jax.vmap(mjx.render_with_segmentation, in_axes=(None, 0, None)))
    get_rgb = jax.jit(jax.vmap(mjx.get_rgb, in_axes=(None, None, 0)), static_argnums=1)
    get_seg = jax.jit(jax.vmap(mjx.get_segmentation, in_axes=(None, None, 0)), static_argnums=1)

    def frame() -> tuple:
        d = refit(mx, step(mx, state["d"]), rc.pytree())
        rgb, _, seg, state["d"] = render(mx, d, rc.pytree())
        return get_rgb(rc.pytree(), 0, rgb) * 255, get_seg(rc.pytree(), 0, seg)[..., None]

    def rgb_only() -> Any:
        return frame()[0].block_until_ready()

    return rgb_only, frame


def run_mjx(args: Any) -> dict:
    from mixshard.augment.inputs.arrays import as_torch

    rgb_only, jax_frame = mjx_frame(args)

    def frame() -> tuple:  # JAX in, torch views (zero-copy), a JAX result out
        rgb, seg = jax_frame()
        (rgb_t, back), (seg_t, _) = as_torch(rgb), as_torch(seg)
        state["back"] = back
        return rgb_t, seg_t

    state: dict[str, Any] = {}
    bg = backgrounds(args)
    pasted = with_layer(frame, [-1, 0], bg)

    def as_jax() -> Any:
        pasted_t = pasted()
        return state["back"](pasted_t).block_until_ready()

    row = measure({"rgb": None, "ids": rgb_only, "with": as_jax}, args)
    row["layer"] = layer_only(frame, [-1, 0], bg, args)
    row["render"] = "jax (N, H, W, 3) float32 0..1, ids (N, H, W) int32, sky -1; via DLPack"
    return row


def run_genesis(args: Any) -> dict:
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    import genesis as gs
    import torch

    gs.init(backend=gs.cpu, logging_level="warning")
    scene = gs.Scene(
        show_viewer=False,
        vis_options=gs.options.VisOptions(split_envs=True),  # else only env 0 is rendered
        renderer=gs.renderers.Rasterizer(),
    )
    scene.add_entity(gs.morphs.Plane())
    scene.add_entity(gs.morphs.Box(size=(0.2, 0.2, 0.2), pos=(0, 0, 0.5)))
    scene.add_entity(gs.morphs.Sphere(radius=0.1, pos=(0.3, 0, 0.8)))
    cam = scene.add_camera(res=(args.size, args.size), pos=(1.6, 0, 1.0), lookat=(0, 0, 0.3))
    scene.build(n_envs=args.envs)

    def rgb_only() -> Any:
        scene.step()
        return torch.from_numpy(cam.render(rgb=True)[0])

    def frame() -> tuple:
        scene.step()
        rgb, _, seg, _ = cam.render(rgb=True, segmentation=True)
        return torch.from_numpy(rgb), torch.from_numpy(seg).unsqueeze(-1)

    bg = backgrounds(args)
    # segmentation index 0 is no entity (-1 in the scene's map), 1 the plane
    row = measure({"rgb": rgb_only, "ids": frame, "with": with_layer(frame, [0, 1], bg)}, args)
    row["layer"] = layer_only(frame, [0, 1], bg, args)
    row["render"] = "(N, H, W, 3) uint8 numpy; seg (N, H, W) int64 index map, 0 = none"
    return row


def newton_frame(args: Any) -> tuple[Callable[[], Any], Callable[[], tuple], int]:
    """Newton's SensorCamera on Warp's CPU device, a box falling in each world."""
    import newton
    import numpy as np
    import torch
    import warp as wp
    from newton.sensors import SensorCamera

    n, s = args.envs, args.size
    wp.config.quiet = True
    wp.set_device("cpu")
    builder = newton.ModelBuilder()
    for _ in range(n):
        builder.begin_world()
        body = builder.add_body(xform=wp.transform(wp.vec3(0.0, 0.0, 0.6), wp.quat_identity()))
        builder.add_shape_box(body, hx=0.3, hy=0.3, hz=0.3, color=(1.0, 0.2, 0.2))
        builder.end_world()
    ground = builder.add_ground_plane()
    model = builder.finalize()
    state, after, control = model.state(), model.state(), model.control()
    solver = newton.solvers.SolverXPBD(model)
    camera = SensorCamera(model)
    camera.create_default_light()
    rays = SensorCamera.compute_camera_rays_pinhole(s, s, camera_fov=0.9, device=model.device)
    eye, target = np.array([0.0, -3.0, 1.2]), np.array([0.0, 0.0, 0.5])
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    turn = np.stack([right, np.cross(right, forward), -forward], axis=1).flatten().tolist()
    pose = wp.transformf(wp.vec3(*eye), wp.quat_from_matrix(wp.mat33(*turn)))
    views = wp.array([pose] * n, dtype=wp.transformf)
    color, shape = camera.allocate_image_color(n, s, s), camera.allocate_image_shape_index(n, s, s)
    rgba = torch.from_dlpack(color).view(torch.uint8).unflatten(-1, (s, 4))  # views, made once
    ids = torch.from_dlpack(shape).view(torch.int32)

    def render(**outputs: Any) -> None:
        solver.step(state, after, control, None, 1 / 60)
        state.assign(after)
        model.bvh_refit_shapes(state)
        camera.update(state, views, rays, **outputs)

    def rgb_only() -> Any:
        render(color_image=color)
        return rgba

    def frame() -> tuple:
        render(color_image=color, shape_index_image=shape)
        return rgba, ids.unsqueeze(-1)

    return rgb_only, frame, ground


def run_newton(args: Any) -> dict:
    rgb_only, frame, ground = newton_frame(args)
    bg = backgrounds(args)
    row = measure(
        {"rgb": rgb_only, "ids": frame, "with": with_layer(frame, [-1, ground], bg)}, args
    )
    row["layer"] = layer_only(frame, [-1, ground], bg, args)
    row["render"] = "(N, H, W) uint32 packed RGBA (Warp) -> (N, H, W, 4); shape ids uint32, none -1"
    return row


def run_maniskill3(args: Any) -> dict:
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401 - registers the tasks

    import mixshard
    from mixshard.maniskill import ManiSkillBackgrounds

    raw = gym.make(
        "PickCube-v1",
        num_envs=1,  # on the CPU: one env per process
        obs_mode="rgb+segmentation",
        render_backend="cpu",
        sim_backend="physx_cpu",
        sensor_configs={"width": args.size, "height": args.size},
    )
    bg = mixshard.Backgrounds(args.pack, 1, frames=1, seed=1)
    env = ManiSkillBackgrounds(raw, bg)
    env.reset(seed=0)
    action = raw.action_space.sample() * 0
    # (rgb and segmentation come from one render pass: no RGB-only variant)
    row = measure(
        {"rgb": None, "ids": lambda: raw.step(action), "with": lambda: env.step(action)}, args
    )
    row["layer"] = float("nan")
    row["envs"] = 1
    row["render"] = "torch (1, H, W, 3) uint8, seg (1, H, W, 1) int16, 0 = none"
    return row


RUNNERS: dict[str, Callable[[Any], dict]] = {
    "dm_control": run_dm_control,
    "mujoco_warp": run_mujoco_warp,
    "mjx": run_mjx,
    "genesis": run_genesis,
    "newton": run_newton,
    "maniskill3": run_maniskill3,
}


# -- the parent: one process per simulator -----------------------------------------------------


def make_pack(size: int) -> Path:
    """Procedural backgrounds at the render size (made once, in bench-out)."""
    import mixshard
    from mixshard.testdata import make_image_folder

    out = OUT / f"sims-backgrounds-{size}"
    if not (out / "index.json").exists():
        src = OUT / "src" / "sims-backgrounds"
        if not src.exists():
            make_image_folder(src, classes=2, per_class=16, seed=3, max_side=160)
        mixshard.pack(src, out, size=size, labels="none", workers=1, overwrite=True)
    return out


def child(name: str, args: argparse.Namespace) -> dict:
    """Run one simulator in a process of its own; its row, or why it could not run."""
    if importlib.util.find_spec(RUNNERS_MODULE[name]) is None:
        return {"name": name, "error": f"not installed (pip install {DISTRIBUTION[name]})"}
    cmd = [sys.executable, __file__, "--one", name, "--pack", str(args.pack)]
    cmd += [f"--{k}={getattr(args, k)}" for k in ("envs", "size", "steps", "rounds", "threads")]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"name": name, "error": f"ran past --timeout {args.timeout} s"}
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    if res.returncode != 0 or not lines:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return {"name": name, "error": f"failed: {tail[:200]}"}
    return json.loads(lines[-1])


RUNNERS_MODULE = {
    "dm_control": "dm_control",
    "mujoco_warp": "mujoco_warp",
    "mjx": "mujoco.mjx",
    "genesis": "genesis",
    "newton": "newton",
    "maniskill3": "mani_skill",
}


def one(name: str, args: argparse.Namespace) -> None:
    """The child: run one simulator, print its row as one JSON line."""
    import torch

    # two threads on a busy 2-core machine wait for each other at every op (70 ms for a
    # 4 x 96 x 96 composite at a load of 11, 0.6 ms with one): the count is the run's choice
    torch.set_num_threads(args.threads)
    row = RUNNERS[name](args)
    row.setdefault("envs", args.envs)
    row["name"] = name
    row["version"] = importlib.metadata.version(DISTRIBUTION[name])
    print(json.dumps(row))


def ms(row: dict, key: str) -> str:
    value = row.get(key)
    return "-" if value is None or value != value else f"{1e3 * value:.2f}"


def share(row: dict) -> str:
    """The layer alone as a share of the step with ids (steadier on a busy machine than the
    ratio of two noisy steps)."""
    layer = row.get("layer")
    return "-" if layer is None or layer != layer else f"{100 * layer / row['ids']:.1f}%"


def report(rows: list[dict], args: argparse.Namespace, load: tuple) -> str:
    ran = [r for r in rows if "error" not in r]
    body = table(
        ["simulator", "version", "envs", "RGB step (ms)", "+ ids (ms)", "+ background (ms)",
         "background / ids step", "layer alone (ms)", "layer / ids step", "what it renders"],
        [
            [r["name"], r["version"], r["envs"], ms(r, "rgb"), ms(r, "ids"), ms(r, "with"),
             f"{r['with'] / r['ids']:.3f}", ms(r, "layer"), share(r), r["render"]]
            for r in ran
        ],
    )  # fmt: skip
    lines = [f"Machine: {machine()}; load average before/after {load[0]:.1f}/{load[1]:.1f}"]
    lines += [
        f"{args.size} x {args.size} px, median of {args.rounds * args.steps} steps each, "
        f"torch threads {args.threads}",
        body,
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"could not run {r['name']}: {r['error']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 envs, 32 px, a few steps")
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each child")
    parser.add_argument("--only", action="append", choices=SIMULATORS)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per simulator")
    parser.add_argument("--one", choices=SIMULATORS, help=argparse.SUPPRESS)
    parser.add_argument("--pack", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one, args)
        return
    if args.quick:
        args.envs, args.size, args.steps, args.rounds = 2, 32, 3, 1
    print("Command: python scripts/bench_simulators.py " + " ".join(sys.argv[1:]))
    args.pack = make_pack(args.size)
    before = os.getloadavg()[0]
    rows = [child(name, args) for name in args.only or SIMULATORS]
    text = report(rows, args, (before, os.getloadavg()[0]))
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_simulators.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
