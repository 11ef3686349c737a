"""docs/simulators.md's lines, run: on the real simulators where they are installed (each test
skips without its own), and on tensors of the documented layouts for Isaac Lab and Newton, which
need an RTX GPU or were not installed here.

Each test pastes a tiny clip pack (`helpers.clip_pack`) at the render size, and checks pixel for
pixel: the kept pixels are the render's, the others the environment's own background.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from helpers import clip_pack

import mixshard
from mixshard import masks

XML = """<mujoco><worldbody><light pos="0 0 3" dir="0 0 -1"/>
<camera name="cam" pos="0 -1.6 1.1" xyaxes="1 0 0 0 0.57 0.82"/>
<geom name="floor" type="plane" size="3 3 .1" rgba=".5 .5 .5 1"/>
<body pos="0 0 .4"><freejoint/><geom type="box" size=".15 .15 .15" rgba="1 .2 .2 1"/></body>
</worldbody></mujoco>"""


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Clip packs at the sizes the tests render, by size."""
    root = tmp_path_factory.mktemp("sims")
    return {s: clip_pack(root / str(s), [4, 5, 6, 3], size=s) for s in (8, 64, 84)}


def as_nhwc(t) -> torch.Tensor:
    return torch.as_tensor(np.asarray(t)) if not isinstance(t, torch.Tensor) else t.cpu()


def check_pasted(obs, rgb, keep, bg) -> None:
    """Kept pixels are the render's, the others each environment's background."""
    obs, rgb = as_nhwc(obs), as_nhwc(rgb)
    keep = as_nhwc(keep).bool().reshape(rgb.shape[:3] + (1,))
    images = bg.images(layout="NHWC").cpu()
    want = torch.where(keep, rgb, images.to(rgb.dtype) if rgb.is_floating_point() else images)
    assert 0 < keep.float().mean() < 1
    assert torch.equal(obs[..., :3], want[..., :3].to(obs.dtype))


@pytest.mark.timeout(600)
def test_genesis_lines(clips):
    gs = pytest.importorskip("genesis")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    gs.init(backend=gs.cpu, logging_level="warning")
    scene = gs.Scene(
        show_viewer=False,
        vis_options=gs.options.VisOptions(split_envs=True),
        renderer=gs.renderers.Rasterizer(),
    )
    plane = scene.add_entity(gs.morphs.Plane())
    scene.add_entity(gs.morphs.Box(size=(0.2, 0.2, 0.2), pos=(0, 0, 0.5)))
    cam = scene.add_camera(res=(64, 64), pos=(1.6, 0, 1.0), lookat=(0, 0, 0.3))
    scene.build(n_envs=3)
    bg = mixshard.Backgrounds(clips[64], 3, frames=1)
    ids = scene.segmentation_idx_dict
    background = [i for i, key in ids.items() if key == -1 or key[0] == plane.idx]
    scene.step()
    rgb, _, seg, _ = cam.render(rgb=True, segmentation=True)
    keep = masks.from_segmentation(torch.from_numpy(seg), background=background)
    obs = bg.composite(rgb, keep, layout="NHWC")
    assert isinstance(obs, np.ndarray) and obs.shape == (3, 64, 64, 3)
    check_pasted(obs, rgb, keep, bg)
    bg.step()
    before = bg.clip.clone()
    scene.reset(envs_idx=[1])
    bg.reset(index=[1])
    assert bg.episode.tolist() == [0, 1, 0] and bg.clip[[0, 2]].tolist() == before[[0, 2]].tolist()


@pytest.mark.timeout(600)
def test_mujoco_warp_lines(clips):
    mujoco = pytest.importorskip("mujoco")
    mjw = pytest.importorskip("mujoco_warp")
    wp = pytest.importorskip("warp")
    m = mujoco.MjModel.from_xml_string(XML)
    n = 4
    with wp.ScopedDevice("cpu"):
        model, data = mjw.put_model(m), mjw.put_data(m, mujoco.MjData(m), nworld=n)
        rc = mjw.create_render_context(
            m, nworld=n, cam_res=(64, 64), render_rgb=True, render_seg=True
        )
        rgb, seg = wp.zeros((n, 64, 64), dtype=wp.vec3), wp.zeros((n, 64, 64), dtype=wp.vec2i)
        floor = m.geom("floor").id
        bg = mixshard.Backgrounds(clips[64], n, frames=1)
        mjw.step(model, data)
        mjw.render(model, data, rc)
        mjw.get_rgb(rc, 0, rgb)
        mjw.get_segmentation(rc, 0, seg)
        geoms = torch.from_dlpack(seg)[..., 0]
        keep = masks.from_segmentation(geoms, background=[-1, floor])
        obs = bg.composite(torch.from_dlpack(rgb) * 255, keep, layout="NHWC")
    assert obs.shape == (n, 64, 64, 3) and obs.dtype == torch.float32
    check_pasted(obs, torch.from_dlpack(rgb) * 255, keep, bg)


@pytest.mark.timeout(600)
def test_mjx_lines(clips):
    jax = pytest.importorskip("jax")
    pytest.importorskip("mujoco_warp")
    os.environ.setdefault("MJX_WARP_ENABLED", "true")
    mujoco = pytest.importorskip("mujoco")
    from mujoco import mjx

    m = mujoco.MjModel.from_xml_string(XML)
    n, floor = 2, m.geom("floor").id
    mx = mjx.put_model(m, impl="warp")
    d = jax.vmap(lambda i: mjx.make_data(m, impl="warp"))(jax.numpy.arange(n))
    d = jax.jit(jax.vmap(mjx.forward, in_axes=(None, 0)))(mx, d)  # the bodies' poses
    rc = mjx.create_render_context(m, nworld=n, cam_res=(64, 64), render_rgb=True, render_seg=True)
    d = jax.jit(jax.vmap(mjx.refit_bvh, in_axes=(None, 0, None)))(mx, d, rc.pytree())
    render = jax.jit(jax.vmap(mjx.render_with_segmentation, in_axes=(None, 0, None)))
    packed_rgb, _, packed_seg, d = render(mx, d, rc.pytree())
    get_rgb = jax.vmap(mjx.get_rgb, in_axes=(None, None, 0))
    get_seg = jax.vmap(mjx.get_segmentation, in_axes=(None, None, 0))
    bg = mixshard.Backgrounds(clips[64], n, frames=1)
    rgb = get_rgb(rc.pytree(), 0, packed_rgb) * 255
    geoms = get_seg(rc.pytree(), 0, packed_seg)
    keep = masks.from_segmentation(geoms, background=[-1, floor])
    obs = bg.composite(rgb, keep, layout="NHWC")
    assert isinstance(keep, jax.Array) and isinstance(obs, jax.Array)
    check_pasted(obs, rgb, keep, bg)


@pytest.mark.timeout(300)
def test_dm_control_lines(clips):
    os.environ.setdefault("MUJOCO_GL", "egl")
    suite = pytest.importorskip("dm_control.suite")
    envs = [suite.load("cheetah", "run", task_kwargs={"random": i}) for i in range(2)]
    for env in envs:
        env.reset()
    bg = mixshard.Backgrounds(clips[84], 2, frames=1)
    rgb = np.stack([env.physics.render(84, 84, camera_id=0) for env in envs])
    ids = np.stack([env.physics.render(84, 84, camera_id=0, segmentation=True) for env in envs])
    ground = np.flatnonzero(envs[0].physics.model.geom_type == 0).tolist()
    keep = masks.from_segmentation(ids[..., 0], background=[-1, *ground])
    obs = bg.composite(rgb, keep, layout="NHWC")
    assert isinstance(obs, np.ndarray) and obs.dtype == np.uint8
    check_pasted(obs, rgb, keep, bg)


def test_isaac_lab_lines(clips):
    """Isaac Lab's documented TiledCamera output, made by hand: rgb a view of rgba, int32 ids
    with labels in `info`, depth with `inf` where nothing was hit."""
    n = 3
    rgba = torch.randint(0, 256, (n, 8, 8, 4), dtype=torch.uint8)
    ids = torch.full((n, 8, 8, 1), 5, dtype=torch.int32)
    ids[:, :, :3] = 0
    ids[:, :, 3] = 1
    depth = torch.full((n, 8, 8, 1), 1.5)
    depth[:, :, :4] = math.inf
    out = {"rgb": rgba[..., :3], "rgba": rgba, "semantic_segmentation": ids, "depth": depth}
    info = {"semantic_segmentation": {"idToLabels": {
        "0": {"class": "BACKGROUND"}, "1": {"class": "UNLABELLED"}, "5": {"class": "robot"},
    }}}  # fmt: skip
    bg = mixshard.Backgrounds(clips[8], n, frames=1)
    labels = info["semantic_segmentation"]["idToLabels"]
    background = [
        int(i) for i, v in labels.items() if v.get("class") in ("BACKGROUND", "UNLABELLED")
    ]
    keep = masks.from_segmentation(
        out["semantic_segmentation"], background=background, layout="NHWC"
    )
    assert torch.equal(keep, masks.from_depth(out["depth"], far=3.0, layout="NHWC"))
    obs = bg.composite(out["rgb"], keep, layout="NHWC")
    check_pasted(obs, out["rgb"], keep, bg)
    bg.reset(torch.tensor([0, 1, 0], dtype=torch.int32))  # Isaac Gym's reset_buf: a mask
    assert bg.episode.tolist() == [0, 1, 0]


@pytest.mark.timeout(600)
def test_newton_lines(clips):
    """Newton's SensorCamera on Warp's CPU device: a red box per world over the ground plane."""
    newton = pytest.importorskip("newton")
    wp = pytest.importorskip("warp")
    from newton.sensors import SensorCamera

    n, w, h = 2, 64, 64
    with wp.ScopedDevice("cpu"):
        builder = newton.ModelBuilder()
        for _ in range(n):
            builder.begin_world()
            body = builder.add_body(xform=wp.transform(wp.vec3(0.0, 0.0, 0.5), wp.quat_identity()))
            builder.add_shape_box(body, hx=0.4, hy=0.4, hz=0.4, color=(1.0, 0.0, 0.0))
            builder.end_world()
        ground = builder.add_ground_plane()
        model = builder.finalize()
        state = model.state()
        camera = SensorCamera(model)
        camera.create_default_light()
        rays = SensorCamera.compute_camera_rays_pinhole(w, h, camera_fov=0.9, device=model.device)
        camera_transforms = wp.array(
            [look_from((0.0, -3.0, 1.2), (0.0, 0.0, 0.5))] * n, dtype=wp.transformf
        )
        bg = mixshard.Backgrounds(clips[64], n, frames=1)
        color = camera.allocate_image_color(n, w, h)
        shape = camera.allocate_image_shape_index(n, w, h)
        camera.update(state, camera_transforms, rays, color_image=color, shape_index_image=shape)
    rgba = torch.from_dlpack(color).view(torch.uint8).unflatten(-1, (w, 4))
    ids = torch.from_dlpack(shape).view(torch.int32)
    keep = masks.from_segmentation(ids, background=[-1, ground])
    obs = bg.composite(rgba, keep, layout="NHWC")
    assert rgba[0, h // 2, w // 2, 0] > 100 and rgba[0, h // 2, w // 2, 1:3].max() == 0  # red
    assert torch.equal(obs[..., 3], rgba[..., 3])  # the alpha comes back unchanged
    check_pasted(obs, rgba[..., :3], keep, bg)


def look_from(eye, target):
    """A Warp transform of a camera at `eye` looking at `target` (-Z forward, +Y up, z up)."""
    import warp as wp

    eye_, forward = np.array(eye), np.array(target) - np.array(eye)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    rotation = np.stack([right, np.cross(right, forward), -forward], axis=1)
    quat = wp.quat_from_matrix(wp.mat33(*rotation.flatten().tolist()))
    return wp.transformf(wp.vec3(*eye_), quat)
