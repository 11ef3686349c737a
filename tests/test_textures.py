"""Clip frames in MuJoCo textures: `mixshard.textures` (the target texture, the reads ahead, the
keyed player) and `mixshard.distracting` (the Distracting Control Suite's and DMC-VB's
background environments from clip packs).

The models are tiny MJCF scenes built here (an 8 px skybox, a `grid` material); the packs are
`helpers.clip_pack`'s, whose frame `f` of clip `c` is red `c`, green `f`, blue `30 x` in column
`x`, so the texture's bytes say exactly which frame shows. dm_control is not needed: a stand-in
environment gives the wrappers a `physics` with the model and steps as dm_control's
`Environment` does (a step after the last one resets); the upload is recorded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import clip_pack, make_flat

import mixshard
from mixshard.core.errors import MixshardError
from mixshard.reading.source import resolve_source

mujoco = pytest.importorskip("mujoco")

from mixshard.distracting import (  # noqa: E402
    DistractingBackgroundEnv,
    KubricBackgroundEnv,
    dcs_draw,
    dcs_turn,
    dmcvb_draw,
)
from mixshard.textures import TexturePlayer, TextureTarget  # noqa: E402

LENGTHS = [3, 5, 2, 4]
SCENE = """<mujoco><asset>{sky}
<texture name="grid" type="2d" builtin="checker" rgb1=".1 .2 .3" rgb2=".2 .3 .4" width="4"
 height="4"/>
<material name="{material}" texture="grid"/></asset>
<worldbody><geom type="plane" size="1 1 .1" material="{material}"/></worldbody></mujoco>"""
SKY = '<texture name="sky" type="skybox" builtin="gradient" rgb1=".4 .6 .8" rgb2="0 0 0" ' \
    'width="{size}" height="{size}"/>'  # fmt: skip


def model(size: int = 8, sky: bool = True, material: str = "grid") -> object:
    xml = SCENE.format(sky=SKY.format(size=size) if sky else "", material=material)
    return mujoco.MjModel.from_xml_string(xml)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return clip_pack(tmp_path_factory.mktemp("tex"), LENGTHS)


class Step:
    def __init__(self, first: bool) -> None:
        self._first = first

    def first(self) -> bool:
        return self._first


class Physics:
    def __init__(self, mjmodel: object) -> None:
        self.model = mjmodel


class Env:
    """dm_control's `Environment` as the wrappers see it: `physics`, `reset`, and `step`,
    which resets after `length` steps (returning a first time step)."""

    def __init__(self, mjmodel: object, length: int = 1000) -> None:
        self.physics, self.length, self.t = Physics(mjmodel), length, 0

    def reset(self) -> Step:
        self.t = 0
        return Step(True)

    def step(self, action: object) -> Step:
        if self.t >= self.length:
            return self.reset()
        self.t += 1
        return Step(False)


def shown(env: DistractingBackgroundEnv) -> tuple[int, int]:
    """(clip, frame) in the sky now, read from its bytes."""
    pixels = env._target.pixels
    assert (pixels[..., 2] == (np.arange(8) * 30) % 256).all()  # whole, unflipped rows
    return int(pixels[0, 0, 0]), int(pixels[0, 0, 1])


def wrapped(clips: Path, cls: type = DistractingBackgroundEnv, length: int = 1000, **kw):
    uploads: list[int] = []
    env = cls(Env(model(), length), clips, upload=uploads.append, **kw)
    return env, uploads


def test_the_sky_becomes_one_square_face_and_is_written_in_place():
    m = model()
    target = TextureTarget(m)
    assert (target.id, target.size, int(m.tex_height[0])) == (0, 8, 8)  # 48 rows -> 8
    target.pixels[:] = 7
    assert (m.tex_data[: 8 * 8 * 3] == 7).all() and m.tex_data[8 * 8 * 3] != 7


def test_the_draws_are_dcs_draws_in_dcs_order():
    frames = [np.arange(n) + 100 * c for c, n in enumerate(LENGTHS)]
    for seed in range(20):
        for dynamic in (True, False):
            ours, theirs = np.random.RandomState(seed), np.random.RandomState(seed)
            got = dcs_draw(ours, frames, dynamic, None)
            paths = [f"davis/clip{c}" for c in range(len(LENGTHS))]  # DCS draws from names
            clip = int(str(theirs.choice(paths))[len("davis/clip") :])
            names = [f"{f:05d}.jpg" for f in range(LENGTHS[clip])]
            if not dynamic:
                names = [theirs.choice(names)]
            start, direction = theirs.choice(len(names)), theirs.choice([-1, 1])
            expected = [100 * clip + int(n[:5]) for n in names]
            assert (got.frames.tolist(), got.start, got.direction) == (expected, start, direction)
            assert ours.randint(1 << 30) == theirs.randint(1 << 30)  # no draw more or fewer


def test_the_shuffle_buffer_shuffles_every_frame_as_dcs_shuffles_its_file_names():
    frames = [np.arange(n) + 100 * c for c, n in enumerate(LENGTHS)]
    ours, theirs = np.random.RandomState(5), np.random.RandomState(5)
    got = dcs_draw(ours, frames, True, 6)
    names = [f"clip{c}/{f:05d}" for c, n in enumerate(LENGTHS) for f in range(n)]
    theirs.shuffle(names)
    expected = [100 * int(n[4]) + int(n[-5:]) for n in names[:6]]
    start, direction = theirs.choice(6), theirs.choice([-1, 1])
    assert (got.frames.tolist(), got.start, got.direction) == (expected, start, direction)


def test_dmcvb_draws_its_static_frame_with_randint():
    frames = [np.arange(n) for n in LENGTHS]
    ours, theirs = np.random.RandomState(3), np.random.RandomState(3)
    got = dmcvb_draw(ours, frames, dynamic=False)
    clip = theirs.choice(len(LENGTHS))
    frame = theirs.randint(LENGTHS[clip])
    assert got.frames.tolist() == [frame] and got.start == theirs.choice(1)


def test_the_turn_shows_the_first_frame_once_and_the_last_twice():
    index, direction, seen = 1, 1, []
    for _ in range(9):
        index, direction = dcs_turn(index, direction, 4)
        seen.append(index)
    assert seen == [2, 3, 3, 2, 1, 0, 1, 2, 3]
    assert dcs_turn(0, -1, 1) == (0, 1) and dcs_turn(0, 1, 1) == (0, -1)


def test_a_dynamic_episode_plays_the_drawn_clip_from_the_drawn_frame_with_its_turns(clips):
    env, uploads = wrapped(clips, dynamic=True, seed=11)
    draws = np.random.RandomState(11)
    env.reset()
    clip = draws.choice(len(LENGTHS))
    index, direction = int(draws.choice(LENGTHS[clip])), int(draws.choice([-1, 1]))
    assert shown(env) == (clip, index)
    for _ in range(12):
        env.step(None)
        index, direction = dcs_turn(index, direction, LENGTHS[clip])
        assert shown(env) == (clip, index)
    assert uploads == [0] * 13  # the sky, at the reset and at every step
    assert env._source._readers == []  # frames at the sky's size: no reader thread
    env.close()


def test_static_backgrounds_stay_and_each_reset_draws_the_next_ones(clips):
    env, uploads = wrapped(clips, dynamic=False, seed=2, length=3)
    draws = np.random.RandomState(2)
    for _ in range(4):  # the first reset, then a step after the last resets (dm_control's)
        clip = draws.choice(len(LENGTHS))
        frame = draws.choice(LENGTHS[clip])
        draws.choice(1), draws.choice([-1, 1])
        if not uploads:
            env.reset()
        else:
            assert not env.step(None).first()  # the last step, then a new episode
            assert env.step(None).first()
        assert shown(env) == (clip, frame)
        env.step(None), env.step(None)
        assert shown(env) == (clip, frame)
    env.close()


def test_video_alpha_blends_over_the_sky_as_it_is_at_each_reset_truncated(clips):
    alpha = 0.3
    env, _ = wrapped(clips, dynamic=True, seed=4, video_alpha=alpha, length=2)
    m = env._env.physics.model
    sky = m.tex_data[: 8 * 8 * 3].reshape(8, 8, 3).copy()
    pack = resolve_source(clips).open_pack()
    every = pack.gather(np.arange(sum(LENGTHS))).transpose(0, 2, 3, 1)
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    draws = np.random.RandomState(4)

    def dcs_blend(image: np.ndarray, background: np.ndarray) -> np.ndarray:
        return (
            alpha * image.astype(np.float32) + (1.0 - alpha) * background.astype(np.float32)
        ).astype(np.uint8)

    env.reset()
    for episode in range(2):
        clip = draws.choice(len(LENGTHS))
        index, direction = int(draws.choice(LENGTHS[clip])), int(draws.choice([-1, 1]))
        for t in range(3):
            if t:
                index, direction = dcs_turn(index, direction, LENGTHS[clip])
            expected = dcs_blend(every[starts[clip] + index], sky)
            assert np.array_equal(env._target.pixels, expected), (episode, t)
            last = expected.copy()
            if t < 2:
                env.step(None)
        env.step(None)  # a new episode: DCS blends over the sky as it is, the last frame shown
        sky = last
    env.close()
    pack.close()


def test_dmcvb_moves_one_frame_every_ten_steps_counting_across_episodes(clips):
    env, _ = wrapped(clips, KubricBackgroundEnv, dynamic=True, seed=9, length=15)
    draws = np.random.RandomState(9)
    env.reset()
    clip = draws.choice(len(LENGTHS))
    index, direction = int(draws.choice(LENGTHS[clip])), int(draws.choice([-1, 1]))
    for t in range(1, 16):
        env.step(None)
        if t % 10 == 0:
            index, direction = dcs_turn(index, direction, LENGTHS[clip])
        assert shown(env) == (clip, index), t
    assert env.step(None).first()  # the next episode; its steps count on from 15
    clip = draws.choice(len(LENGTHS))
    index, direction = int(draws.choice(LENGTHS[clip])), int(draws.choice([-1, 1]))
    for t in range(16, 26):
        env.step(None)
        if t % 10 == 0:
            index, direction = dcs_turn(index, direction, LENGTHS[clip])
        assert shown(env) == (clip, index), t
    env.close()


def test_the_clips_are_dcs_selection_and_the_ground_plane_its_alpha(clips):
    env, _ = wrapped(clips, dataset_videos=["clip3", "clip1"], num_videos=1, seed=0)
    env.reset()
    assert shown(env)[0] == 3  # the first num_videos of the list given
    assert env._env.physics.model.mat_rgba[0, 3] == 1.0
    env.close()
    env, _ = wrapped(clips, ground_plane_alpha=0.3, seed=0)
    env.reset()
    assert env._env.physics.model.mat_rgba[0, 3] == pytest.approx(0.3)
    env.close()


def test_without_clips_the_sky_is_its_first_face_uploaded(clips):
    uploads: list[int] = []
    env = DistractingBackgroundEnv(Env(model()), None, upload=uploads.append)
    before = env._env.physics.model.tex_data[: 8 * 8 * 3].copy()
    env.reset(), env.step(None)
    assert np.array_equal(env._target.pixels.reshape(-1), before) and uploads == [0]


def test_resize_reads_a_smaller_pack_resized_as_dcs_resizes(clips):
    uploads: list[int] = []
    env = DistractingBackgroundEnv(
        Env(model(size=16)), clips, dynamic=True, seed=1, resize=True, upload=uploads.append
    )
    env.reset()
    clip = np.random.RandomState(1).choice(len(LENGTHS))
    index = env._current_img_index
    pack = resolve_source(clips).open_pack()
    frame = pack.gather(np.array([sum(LENGTHS[:clip]) + index]))
    big = F.interpolate(torch.from_numpy(frame).float(), size=(16, 16), mode="bilinear")
    expected = big.round().clamp(0, 255).byte()[0].permute(1, 2, 0).numpy()
    assert np.array_equal(env._target.pixels, expected)
    assert len(env._source._readers) == 1  # resized clips are read ahead on a thread
    with pytest.raises(ValueError, match="no read was asked for under ticket 99"):
        env._source.take(99)
    env.close()
    pack.close()


def test_a_texture_by_id_made_a_given_size_inside_its_bytes_as_dmcgb2_makes_its_screen():
    m = model(size=8)  # the sky: 8 x 48 px of bytes
    target = TextureTarget(m, 0, size=16)  # 16 x 16 <= 8 x 48
    assert (target.size, int(m.tex_width[0]), int(m.tex_height[0])) == (16, 16, 16)
    assert target.pixels.shape == (16, 16, 3)
    assert target.pixels.base is not None and np.shares_memory(target.pixels, m.tex_data)
    assert TextureTarget(model(), 1).name == "grid"  # an id names any texture
    with pytest.raises(MixshardError) as err:
        TextureTarget(model(size=8), 0, size=20)
    assert str(err.value) == (
        "texture 'sky' holds 8 x 48 px; it cannot be made 20 px square (at most 19 px)"
    )
    with pytest.raises(MixshardError, match=r"^the model has no texture 2: it has 2 \('sky', "):
        TextureTarget(model(), 2)


def test_bad_input_is_one_clear_error_before_the_first_episode(clips, tmp_path):
    with pytest.raises(MixshardError, match=r"holds 8 px frames but texture 'sky' is 16 px"):
        DistractingBackgroundEnv(Env(model(size=16)), clips, upload=print)
    with pytest.raises(MixshardError, match=r"no texture named 'sky2'; its textures are 'sky'"):
        TextureTarget(model(), "sky2")
    with pytest.raises(MixshardError, match=r"no skybox texture \(its textures: 'grid'\)"):
        DistractingBackgroundEnv(Env(model(sky=False)), clips, upload=print)
    with pytest.raises(MixshardError, match=r"num_videos=8 asks for more clips than the 4"):
        DistractingBackgroundEnv(Env(model()), clips, num_videos=8, upload=print)
    with pytest.raises(MixshardError, match=r"lacks 60 of the 60 clips asked for: 'bear'"):
        DistractingBackgroundEnv(Env(model()), clips, dataset_videos="train", upload=print)
    with pytest.raises(MixshardError) as err:
        DistractingBackgroundEnv(Env(model(material="floor")), clips, upload=print)
    assert str(err.value) == (
        "the model has no material 'grid', whose alpha ground_plane_alpha=1.0 sets (its "
        "materials: 'floor'); pass ground_plane_alpha=None"
    )
    make_flat(tmp_path / "src", n=3, ext=".png")
    mixshard.pack(tmp_path / "src", tmp_path / "images", size=8, workers=1, labels="none")
    with pytest.raises(MixshardError, match=r"is an image pack \(still images\)"):
        DistractingBackgroundEnv(Env(model()), tmp_path / "images", upload=print)
    with pytest.raises(ValueError, match=r"video_alpha must be in the range \[0, 1\], got 2"):
        DistractingBackgroundEnv(Env(model()), clips, video_alpha=2, upload=print)


def test_the_player_plays_the_keyed_clips_of_backgrounds(clips):
    uploads: list[int] = []
    bg = mixshard.Backgrounds(clips, 3, frames=1, playback="pingpong", seed=6)
    players = [
        TexturePlayer(clips, model(), upload=uploads.append, env=e, seed=6) for e in range(3)
    ]
    for _ in range(2):  # two episodes, each as Backgrounds plays it
        for f in players:
            f.reset()
        for t in range(9):
            if t:
                bg.step()
                for f in players:
                    f.step()
            images = bg.images().permute(0, 2, 3, 1).numpy()
            for e, f in enumerate(players):
                assert np.array_equal(f.target.pixels, images[e]), (e, t)
        bg.reset()
    assert len(uploads) == 3 * 2 * 9
    for f in players:
        f.close()
    bg.close()


def test_dcs_suite_passes_its_arguments_to_the_drop_in(clips, tmp_path):
    """docs/migrating.md: DCS's `suite.load` builds the class found in its `background`
    module with `suite_utils.get_background_kwargs`' arguments; the drop-in takes them."""
    import json
    import types

    from mixshard.core.manifest import Manifest
    from mixshard.core.presets import DAVIS17_TRAIN

    davis = tmp_path / "davis17-train"
    davis.mkdir()
    for member in clips.iterdir():
        (davis / member.name).symlink_to(member)
    data = json.loads((clips / "index.json").read_text())
    for clip, name in zip(data["clips"], DAVIS17_TRAIN):
        clip["name"] = name
    (davis / "index.json").unlink()
    Manifest.from_dict(data, "test").save(davis)
    background = types.SimpleNamespace(DistractingBackgroundEnv=None)
    background.DistractingBackgroundEnv = DistractingBackgroundEnv  # the one line
    kwargs = dict(  # what `suite.load(difficulty="easy", dynamic=True)` passes for cartpole
        num_videos=4, video_alpha=1.0, ground_plane_alpha=0.3, dynamic=True,
        dataset_path=str(davis), dataset_videos="train", shuffle_buffer_size=None,
    )  # fmt: skip
    env = background.DistractingBackgroundEnv(Env(model()), **kwargs, upload=lambda i: None)
    env.reset()
    assert shown(env)[0] in range(4)  # the first 4 of DCS's list: the pack's 4 clips
    assert env._env.physics.model.mat_rgba[0, 3] == pytest.approx(0.3)
    env.close()


def test_texture_feeder_is_texture_player_under_its_old_name_with_a_warning():
    import mixshard.textures

    with pytest.warns(DeprecationWarning, match="TextureFeeder is now TexturePlayer"):
        assert mixshard.textures.TextureFeeder is TexturePlayer
    with pytest.raises(AttributeError, match="has no attribute 'Feeder'"):
        mixshard.textures.Feeder  # noqa: B018


def test_the_player_writes_any_square_texture_by_name(clips):
    xml = """<mujoco><asset><texture name="screen" type="2d" builtin="flat" rgb1="1 1 1"
      width="8" height="8"/><material name="screen" texture="screen"/></asset><worldbody>
      <geom type="box" size=".1 .1 .1" material="screen"/></worldbody></mujoco>"""
    m = mujoco.MjModel.from_xml_string(xml)
    uploads: list[int] = []
    player = TexturePlayer(clips, m, upload=uploads.append, texture="screen", playback="loop")
    player.reset()
    for t in range(6):
        frame = m.tex_data.reshape(8, 8, 3)
        expected = (player.start + t) % LENGTHS[player.clip]
        assert (int(frame[0, 0, 0]), int(frame[0, 0, 1])) == (player.clip, expected)
        player.step()
    assert uploads == [0] * 7
    player.close()
    import io

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGBA", (8, 8)).save(png, format="PNG")
    rgba = xml.replace('builtin="flat" rgb1="1 1 1"', 'file="s.png" nchannel="4"')
    rgba_model = mujoco.MjModel.from_xml_string(rgba, {"s.png": png.getvalue()})
    with pytest.raises(MixshardError, match=r"texture 'screen' has 4 channels"):
        TexturePlayer(clips, rgba_model, upload=print, texture="screen")


def test_on_a_dm_control_episode_the_sky_is_the_packs_frame(clips, tmp_path):
    """With dm_control (not in the project's environment: skipped there), the drop-in on a real
    suite task, its upload in the physics' own context: the sky holds the pack's frame."""
    suite = pytest.importorskip("dm_control.suite")
    size = 800
    pack = clip_pack(tmp_path, [3, 2], size=size, block_size=2)
    env = DistractingBackgroundEnv(
        suite.load("cartpole", "swingup"), pack, dynamic=True, seed=1, ground_plane_alpha=0.3
    )
    try:
        env.reset()
        for _ in range(4):
            env.step(np.zeros(1))
        pixels = env.physics.model.tex_data[: size * size * 3].reshape(size, size, 3)
        frame = (
            resolve_source(pack).open_pack().gather(np.array([env._images[env._current_img_index]]))
        )
        assert np.array_equal(pixels, frame[0].transpose(1, 2, 0))
        assert env.physics.render(32, 32).shape == (32, 32, 3)
    finally:
        env.close()
