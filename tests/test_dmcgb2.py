"""`mixshard.dmcgb2`: DMC-GB2's video modes (its `ColorVideoWrapper`) from clip packs.

The scenes are tiny MJCF models built here with dm_control suite's two include files (a
skybox, the `grid` material) and a `torso`, rebuilt as DMC-GB2 rebuilds them
(`with_screen`); a stand-in environment gives the wrapper a `physics` that reloads from XML,
resets and steps as dm_control's does (a step after the last starts an episode). The packs are
`helpers.clip_pack`'s, whose frame `f` of clip `c` is red `c`, green `f`, blue `30 x` in
column `x`, so the texture says which frame shows; and real mp4s packed with `resample=
"bicubic"`, whose texture bytes are checked against DMC-GB2's rule itself: every decoded frame
through PIL's `Image.resize` (its default filter), flattened into texture 2. dm_control and
DMC-GB2's code are not needed (`scripts/compare_dmcgb2.py` runs them side by side).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import clip_pack
from PIL import Image

from mixshard import Manifest
from mixshard.core.errors import MixshardError

mujoco = pytest.importorskip("mujoco")

from mixshard.dmcgb2 import (  # noqa: E402
    SCREEN_TEXTURE,
    ColorVideoWrapper,
    dmcgb2_colors,
    video_modes,
    with_screen,
)

EASY = [3, 5, 2, 4, 3, 6, 2, 3, 4, 5]  # frames of video0 ... video9
NAMES = [f"video{i}.mp4" for i in range(100)]
MODEL = """<mujoco><include file="./common/skybox.xml"/><include file="./common/materials.xml"/>
<worldbody><geom name="floor" type="plane" size="2 2 .1" material="grid"/>{site}
<body name="torso" pos="0.3 0 1"><freejoint/><geom type="box" size=".1 .1 .1"/></body>
</worldbody></mujoco>"""
ASSETS = {
    "./common/skybox.xml": '<mujoco><asset><texture name="skybox" type="skybox" '
    'builtin="gradient" rgb1=".4 .6 .8" rgb2="0 0 0" width="8" height="8"/></asset></mujoco>',
    "./common/materials.xml": '<mujoco><asset><texture name="grid" type="2d" builtin="checker"'
    ' rgb1=".1 .2 .3" rgb2=".2 .3 .4" width="4" height="4"/><material name="grid" '
    'texture="grid" reflectance=".2"/><material name="self" rgba=".7 .5 .3 1"/></asset>'
    "</mujoco>",
}


class Step:
    def __init__(self, first: bool) -> None:
        self._first = first

    def first(self) -> bool:
        return self._first


class Physics:
    """dm_control's `Physics` as the wrapper uses it: `reload_from_xml_string`, `model`,
    `data`."""

    def __init__(self) -> None:
        self.reload_from_xml_string(MODEL.format(site=""), ASSETS)

    def reload_from_xml_string(self, xml: str, assets: dict | None = None) -> None:
        files = {k: v if isinstance(v, bytes) else v.encode() for k, v in (assets or {}).items()}
        self.model = mujoco.MjModel.from_xml_string(xml, files)
        self.data = mujoco.MjData(self.model)
        mujoco.mj_forward(self.model, self.data)


class Env:
    """A suite environment as DMC-GB2's `make` hands it on: `physics`, `_domain_name`, and
    `step`, which starts an episode itself after `length` steps."""

    def __init__(self, domain: str = "cartpole", length: int = 1000) -> None:
        self.physics, self._domain_name, self.length, self.t = Physics(), domain, length, 0

    def reset(self) -> Step:
        mujoco.mj_resetData(self.physics.model, self.physics.data)
        mujoco.mj_forward(self.physics.model, self.physics.data)
        self.t = 0
        return Step(True)

    def step(self, action: object) -> Step:
        if self.t >= self.length:
            return self.reset()
        mujoco.mj_step(self.physics.model, self.physics.data)
        self.t += 1
        return Step(False)


def model(site: str = "") -> tuple[str, dict]:
    return MODEL.format(site=site), ASSETS


def wrapped(pack: Path, mode: str = "video_easy", size: int = 8, seed: int = 0, **kw):
    uploads: list[int] = []
    env = ColorVideoWrapper(
        Env(**kw), mode, seed, size, dataset_path=pack, model=model(), upload=uploads.append
    )
    return env, uploads


@pytest.fixture(scope="module")
def easy(tmp_path_factory) -> Path:
    return clip_pack(tmp_path_factory.mktemp("easy"), EASY, names=NAMES[:10], resample="bicubic")


@pytest.fixture(scope="module")
def hard(tmp_path_factory) -> Path:
    lengths = [1 + c % 3 for c in range(100)]
    return clip_pack(tmp_path_factory.mktemp("hard"), lengths, names=NAMES, resample="bicubic")


def texture(env: ColorVideoWrapper) -> np.ndarray:
    """Texture 2's bytes as the renderer reads them: `tex_width x tex_height` RGB from its
    address."""
    m = env._env.physics.model
    w, h, adr = (int(a[SCREEN_TEXTURE]) for a in (m.tex_width, m.tex_height, m.tex_adr))
    return m.tex_data[adr : adr + w * h * 3].reshape(h, w, 3)


def shown(env: ColorVideoWrapper) -> tuple[int, int]:
    """(clip, frame) on the box now, read from the texture's bytes."""
    pixels = texture(env)
    assert (pixels[..., 2] == (np.arange(8) * 30) % 256).all()  # whole, unflipped rows
    assert (pixels[..., :2] == pixels[0, 0, :2]).all()
    return int(pixels[0, 0, 0]), int(pixels[0, 0, 1])


def dmcgb2_schedule(seed: int, n: int, lengths: list[int], resets: list[int], steps: int):
    """DMC-GB2's (clip, frame) after each call, from its documented rule: one draw
    `randint(100) % n` when made; a reset moves the index on and shows frame 0; every call
    shows the counter's frame and moves it on, wrapping. `resets`: the calls that reset."""
    index, frame, clip, seen = np.random.RandomState(seed).randint(100) % n, 0, -1, []
    for t in range(steps):
        if t in resets:
            index, frame = (index + 1) % n, 0
            clip = index
        seen.append((clip, frame))
        frame = (frame + 1) % lengths[clip]
    return seen


def test_the_scene_is_rebuilt_as_dmcgb2_rebuilds_it():
    xml, assets = with_screen(*model(), "walker")
    m = mujoco.MjModel.from_xml_string(xml, assets)
    names = [m.texture(i).name for i in range(m.ntex)]
    assert names == ["skybox", "grid", "projector"] and names[SCREEN_TEXTURE] == "projector"
    assert (m.tex_type[2], m.tex_width[2], m.tex_height[2]) == (2, 512, 6 * 512)  # skybox
    material = m.material("projector")
    assert 2 in np.atleast_1d(material.texid)  # (a role of its layers since MuJoCo 3.2)
    site = m.site("video_screen")
    assert np.allclose(site.size, [1.86, 0.1, 1.86]) and np.allclose(site.pos, [0, 1.96, -0.7])
    half = np.deg2rad(-30) / 2  # euler -30 0 0
    assert np.allclose(site.quat, [np.cos(half), np.sin(half), 0, 0])
    assert m.site_matid[site.id] == m.material("projector").id and m.site_bodyid[site.id] == 0


def test_the_box_goes_last_after_fingers_own_site_and_only_in_dmcgb2s_five_domains():
    xml, assets = with_screen(*model('<site name="own" pos="0 0 1"/>'), "finger")
    m = mujoco.MjModel.from_xml_string(xml, assets)
    assert [m.site(i).name for i in range(m.nsite)] == ["own", "video_screen"]
    assert np.allclose(m.site("video_screen").size, [0.66, 0.1, 0.66])
    xml, assets = with_screen(*model(), "reacher")  # the texture and material, no box
    m = mujoco.MjModel.from_xml_string(xml, assets)
    assert m.nsite == 0 and m.texture(2).name == "projector"


def test_a_reset_plays_the_next_clip_from_frame_0_and_each_step_the_next_frame(easy):
    env, uploads = wrapped(easy, seed=5)
    calls = 3 * 7 + 1
    want = dmcgb2_schedule(5, 10, EASY, resets=[0, 8, 15], steps=calls)
    got = []
    for t in range(calls):
        env.reset() if t in (0, 8, 15) else env.step(None)
        got.append(shown(env))
    assert got == want
    assert want[0][0] == (np.random.RandomState(5).randint(100) % 10 + 1) % 10
    assert texture(env).shape == (8, 8, 3)  # texture 2 made the video's size
    assert uploads == [SCREEN_TEXTURE] * calls  # at every reset and step
    env.close()


def test_an_episode_the_environment_starts_itself_carries_the_clip_and_counter_on(easy):
    env, _ = wrapped(easy, seed=1, length=3)
    env.reset()
    seen = [shown(env)]
    firsts = []
    for _ in range(9):
        firsts.append(env.step(None).first())
        seen.append(shown(env))
    assert firsts[3] and firsts[7]  # two new episodes, neither reset by the wrapper
    assert seen == dmcgb2_schedule(1, 10, EASY, resets=[0], steps=10)
    env.close()


def test_video_hard_hides_the_floor_at_every_reset_and_plays_its_100_clips(hard):
    env, _ = wrapped(hard, "video_hard", seed=42)
    m = env._env.physics.model
    grid = m.material("grid").id
    m.mat_rgba[grid, 3] = 0.5
    env.reset()
    assert m.mat_rgba[grid, 3] == 0.0
    assert shown(env) == ((np.random.RandomState(42).randint(100) + 1) % 100, 0)
    m.mat_rgba[grid, 3] = 0.5
    env.step(None)
    assert m.mat_rgba[grid, 3] == 0.5  # only a reset hides it
    env.close()


def test_video_hard_in_a_model_without_a_grid_is_refused_naming_its_materials(hard):
    xml = MODEL.format(site="").replace('material="grid"', "")
    assets = dict(ASSETS)
    assets["./common/materials.xml"] = assets["./common/materials.xml"].replace(
        '<material name="grid" texture="grid" reflectance=".2"/>', ""
    )
    env = Env()
    with pytest.raises(MixshardError) as err:
        ColorVideoWrapper(env, "video_hard", 0, 8, dataset_path=hard, model=(xml, assets))
    assert str(err.value) == (
        "the model has no material 'grid', whose alpha video_hard sets to 0 (its materials: "
        "'self', 'projector')"
    )


def test_video_easy_leaves_the_floor(easy):
    env, _ = wrapped(easy)
    env.reset()
    assert env._env.physics.model.mat_rgba[env._env.physics.model.material("grid").id, 3] == 1
    env.close()


def test_in_walker_the_box_follows_the_torso_after_every_reset_and_step(easy):
    env, _ = wrapped(easy, domain="walker")
    data = env._env.physics.data
    for t in range(6):
        env.reset() if t == 0 else env.step(None)
        com, xpos = data.body("torso").subtree_com, data.site("video_screen").xpos
        assert (xpos[0], xpos[2]) == (com[0] + 0.0, com[2] - 1.07)
    assert data.body("torso").subtree_com[2] < 1.0  # it fell: the box moved with it
    env.close()


def test_the_static_domains_leave_the_box_where_dmcgb2_puts_it(easy):
    env, _ = wrapped(easy, domain="cartpole")
    env.reset(), env.step(None)
    assert np.allclose(env._env.physics.data.site("video_screen").xpos, [0.0, 0.5, 1.0])
    env.close()


def noise_videos(root: Path, lengths: list[int], side: int) -> list[list[np.ndarray]]:
    """`video{i}.mp4` of `lengths[i]` noise frames, `side` px square, H.264; their frames as
    PyAV decodes them (FFmpeg's, as OpenCV's)."""
    import av

    rng = np.random.default_rng(7)
    decoded = []
    root.mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(lengths):
        path = root / f"video{i}.mp4"
        with av.open(str(path), "w") as container:
            stream = container.add_stream("libx264", rate=10)
            stream.width = stream.height = side
            stream.pix_fmt = "yuv420p"
            for _ in range(n):
                rgb = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        with av.open(str(path)) as container:
            decoded.append([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    return decoded


def test_the_box_shows_dmcgb2s_own_bytes_from_a_bicubic_pack_of_its_videos(tmp_path):
    """DMC-GB2's `_size_and_flatten`: `Image.fromarray(frame).resize((w, h))` (PIL's bicubic),
    flattened into texture 2, frame after frame; the pack gives those bytes exactly."""
    from mixshard import pack

    lengths = [2, 3, 2, 4, 2, 3, 2, 2, 3, 2]
    decoded = noise_videos(tmp_path / "video_easy", lengths, 48)
    pack(tmp_path / "video_easy", tmp_path / "pack", size=16, clips=True, crop="full",
         workers=1, resample="bicubic")  # fmt: skip
    env, _ = wrapped(tmp_path / "pack", size=16, seed=9)
    want = dmcgb2_schedule(9, 10, lengths, resets=[0, 5], steps=11)
    for t, (clip, frame) in enumerate(want):
        env.reset() if t in (0, 5) else env.step(None)
        theirs = np.asarray(Image.fromarray(decoded[clip][frame]).resize((16, 16)))
        assert np.array_equal(texture(env), theirs), (t, clip, frame)
    env.close()


def test_a_pack_of_another_size_is_named_with_both_sizes(easy):
    with pytest.raises(MixshardError) as err:
        wrapped(easy, size=256)
    assert str(err.value) == (
        f"{easy}/index.json holds 8 px frames but DMC-GB2's texture is 256 px "
        "(video_render_size): pack its videos at 256 px (`make dmcgb2-videos ... SIZE=256`); "
        "it resizes each decoded frame once, to the texture"
    )


def test_an_image_pack_is_refused_as_an_image_pack(tmp_path):
    from mixshard import pack

    (tmp_path / "src").mkdir()
    for i in range(3):
        Image.new("RGB", (8, 8), (i, 0, 0)).save(tmp_path / "src" / f"{i}.png")
    pack(tmp_path / "src", tmp_path / "images", size=8, workers=1, resample="bicubic")
    with pytest.raises(MixshardError, match="is an image pack .still images.; a texture player"):
        wrapped(tmp_path / "images")


def test_fewer_clips_than_the_mode_plays_are_named(tmp_path):
    pack = clip_pack(tmp_path, [2] * 7, names=NAMES[:7], resample="bicubic")
    with pytest.raises(MixshardError) as err:
        wrapped(pack)
    assert str(err.value) == (
        f"{pack}/index.json holds 7 clips but lacks 3 of the 10 of 'dmcgb2-video_easy': "
        "video7.mp4, video8.mp4, video9.mp4; pack it from a source that holds them all"
    )


def test_a_pack_resized_with_another_filter_is_refused(tmp_path):
    pack = clip_pack(tmp_path, EASY, names=NAMES[:10], resample="bilinear-no-antialias")
    with pytest.raises(MixshardError, match="resized with 'bilinear-no-antialias', not PIL's"):
        wrapped(pack)


def test_a_pack_of_some_frames_only_is_refused(tmp_path):
    pack = clip_pack(tmp_path, EASY, names=NAMES[:10], resample="bicubic")
    index = pack / "index.json"
    data = json.loads(index.read_text())
    data["options"].update(every=1, max_frames=2)
    Manifest.from_dict(data, "test").save(pack)
    with pytest.raises(MixshardError) as err:
        wrapped(pack)
    assert str(err.value) == (
        f"{index} keeps only some frames or their grey (every=1, max_frames=2, grey=False): "
        "DMC-GB2 plays every frame of each video in colour (`make dmcgb2-videos` packs them so)"
    )


def test_another_mode_is_left_to_dmcgb2s_own_class(easy, monkeypatch):
    made = []

    def theirs(env, mode, seed, video_render_size=256):
        made.append((mode, seed, video_render_size))
        return "theirs"

    make = video_modes(theirs)
    assert make(Env(), "color_hard", 3) == "theirs" and made == [("color_hard", 3, 256)]
    monkeypatch.setenv("MIXSHARD_DATA", str(easy.parent))
    monkeypatch.setattr("mixshard.dmcgb2.suite_model", lambda domain: model())
    link = easy.parent / "dmcgb2-video_easy-8"
    link.exists() or link.symlink_to(easy)
    env = make(Env(), "video_easy", 3, video_render_size=8)
    assert isinstance(env, ColorVideoWrapper) and made == [("color_hard", 3, 256)]
    env.close()
    with pytest.raises(ValueError) as err:
        ColorVideoWrapper(Env(), "color_hard", 0)
    assert str(err.value) == (
        "mode must be one of video_easy, video_hard, color_video_easy, color_video_hard (got "
        "'color_hard'); video_modes(...) leaves the others to DMC-GB2's own class"
    )


def colours(n: int = 100) -> list[dict]:
    """A colour list shaped as DMC-GB2's `color_<level>.pt`: dicts of float64 arrays, entry
    `i` telling itself apart by `self_rgb`'s blue and the grid's and sky's colours."""
    return [
        dict(
            grid_rgb1=np.array([i / 100, 0.5, 0.25]),
            grid_rgb2=np.array([0.1, i / 200, 0.3]),
            self_rgb=np.array([0.2, 0.4, i / 100]),
            skybox_rgb=np.array([i / 100, 0.3, 0.6]),
        )
        for i in range(n)
    ]


class Reloads(Env):
    """`Env` whose physics counts its reloads."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.reloads = 0
        reload = self.physics.reload_from_xml_string

        def counted(xml: str, assets: dict | None = None) -> None:
            self.reloads += 1
            reload(xml, assets)

        self.physics.reload_from_xml_string = counted  # type: ignore[method-assign]


def coloured(pack: Path, mode: str = "color_video_easy", seed: int = 0, **kw):
    env = ColorVideoWrapper(
        Reloads(**kw), mode, seed, 8, dataset_path=pack, model=model(), upload=lambda i: None,
        colors=colours(),
    )  # fmt: skip
    return env


def self_colour(env: ColorVideoWrapper) -> list[float]:
    m = env._env.physics.model
    return m.mat_rgba[m.material("self").id].tolist()


def test_colours_are_written_into_the_rebuilt_scene_as_dmcgb2_writes_them():
    """Every colour key DMC-GB2 knows, each value as its f-string writes it: the compiled model
    equals one compiled from the files edited by hand (textures' bytes, materials)."""
    colors = dict(
        grid_rgb1=np.array([0.109165, 0.11903745, 0.18573619]), grid_rgb2=[0.2, 0.3, 0.4],
        grid_markrgb=(1.0, 0.5, 0.0), grid_texrepeat=np.array([3, 2]),
        self_rgb=np.array([0.74018287, 0.53282315, 0.47178415]),
        skybox_rgb=np.array([0.25139271, 0.5831122, 0.88217072]), skybox_rgb2=[0.0, 0.1, 0.2],
        skybox_markrgb=[1, 1, 1], unknown=[9, 9, 9],
    )  # fmt: skip
    xml, assets = with_screen(*model(), "walker", colors)
    ours = mujoco.MjModel.from_xml_string(xml, assets)
    edited = dict(ASSETS)
    edited["./common/materials.xml"] = (
        ASSETS["./common/materials.xml"]
        .replace('rgb1=".1 .2 .3" rgb2=".2 .3 .4"', 'rgb1="0.109165 0.11903745 0.18573619" '
                 'rgb2="0.2 0.3 0.4" markrgb="1.0 0.5 0.0"')
        .replace('texture="grid" reflectance', 'texture="grid" texrepeat="3 2" reflectance')
        .replace('rgba=".7 .5 .3 1"', 'rgba="0.74018287 0.53282315 0.47178415 1"')
    )  # fmt: skip
    edited["./common/skybox.xml"] = ASSETS["./common/skybox.xml"].replace(
        'rgb1=".4 .6 .8" rgb2="0 0 0"',
        'rgb1="0.25139271 0.5831122 0.88217072" rgb2="0.0 0.1 0.2" markrgb="1 1 1"',
    )
    assert edited != ASSETS  # (the replacements found their text)
    theirs = mujoco.MjModel.from_xml_string(*with_screen(MODEL.format(site=""), edited, "walker"))
    for name in ("tex_data", "tex_adr", "mat_rgba", "mat_texrepeat"):
        assert np.array_equal(getattr(ours, name), getattr(theirs, name)), name
    assert np.array_equal(ours.mat_texrepeat[ours.material("grid").id], [3, 2])
    assert np.allclose(ours.mat_rgba[ours.material("self").id], [0.74018287, 0.53282315,
                                                                  0.47178415, 1])  # fmt: skip
    plain = mujoco.MjModel.from_xml_string(*with_screen(*model(), "walker"))
    assert not np.array_equal(ours.tex_data, plain.tex_data)  # the sky and grid recoloured


def test_a_colour_mode_rebuilds_the_model_at_each_reset_with_the_next_colours(easy):
    env = coloured(easy, seed=5)
    draw = np.random.RandomState(5).randint(100)
    assert env._env.reloads == 1  # made: DMC-GB2's scene, not yet recoloured
    m = env._env.physics.model  # texture 2 its own size until the reset, as DMC-GB2's
    assert (m.tex_width[SCREEN_TEXTURE], m.tex_height[SCREEN_TEXTURE]) == (512, 6 * 512)
    got, resets = [], [0, 8, 15]
    for t in range(22):
        env.reset() if t in resets else env.step(None)
        got.append(shown(env))
        if t in resets:
            k = resets.index(t)
            assert env._env.reloads == 2 + k, t
            want = colours()[(draw + k) % 100]["self_rgb"].tolist() + [1.0]
            assert self_colour(env) == np.float32(want).tolist(), t
            assert texture(env).shape == (8, 8, 3)  # the new model's texture 2 made 8 px
    assert env._env.reloads == 4  # the steps rebuild nothing
    assert got == dmcgb2_schedule(5, 10, EASY, resets=resets, steps=22)  # video_easy's clips
    env.close()


def test_color_video_hard_plays_video_hards_clips_and_leaves_the_floor(hard):
    env = coloured(hard, "color_video_hard", seed=42)
    env.reset()
    m = env._env.physics.model
    assert m.mat_rgba[m.material("grid").id, 3] == 1.0  # DMC-GB2 hides it in video_hard only
    assert shown(env) == ((np.random.RandomState(42).randint(100) + 1) % 100, 0)
    env.close()


def test_colour_modes_without_100_colours_and_video_modes_with_colours_are_refused(easy):
    with pytest.raises(MixshardError) as err:
        ColorVideoWrapper(Env(), "color_video_hard", 0, 8, dataset_path=easy, colors=colours(99))
    assert str(err.value) == (
        "color_video_hard recolours the scene at every reset from DMC-GB2's colours, at least 100"
        " (got 99): pass colors= (its color_hard.pt, a list of dicts), or make it with "
        "video_modes(ColorVideoWrapper), which loads them as it does"
    )
    with pytest.raises(MixshardError, match=r"at least 100 \(got none\)"):
        ColorVideoWrapper(Env(), "color_video_easy", 0, 8, dataset_path=easy)
    with pytest.raises(MixshardError) as err:
        ColorVideoWrapper(Env(), "video_easy", 0, 8, dataset_path=easy, colors=colours())
    assert str(err.value) == (
        "video_easy recolours nothing but 100 colours were given; pass colors= with "
        "color_video_easy only"
    )


def test_a_materials_file_not_as_dmcgb2_asserts_is_named_when_recoloured():
    xml, assets = model()
    two = dict(assets)
    two["./common/materials.xml"] = assets["./common/materials.xml"].replace(
        "<material", '<texture name="extra" type="2d" builtin="flat" width="2" height="2"/>'
        "<material", 1
    )  # fmt: skip
    with pytest.raises(MixshardError) as err:
        with_screen(xml, two, "walker", {"grid_rgb1": [0, 0, 0]})
    assert str(err.value) == (
        "./common/materials.xml holds the textures 'grid', 'extra'; DMC-GB2 recolours a file of"
        " one texture, 'grid'"
    )
    with_screen(xml, two, "walker", {"self_rgb": [0, 0, 0]})  # the grid left alone: no check
    swapped = dict(assets)
    swapped["./common/materials.xml"] = assets["./common/materials.xml"].replace(
        'name="self"', 'name="other"'
    )
    with pytest.raises(MixshardError) as err:
        with_screen(xml, swapped, "walker", {"self_rgb": [0, 0, 0]})
    assert str(err.value) == (
        "./common/materials.xml holds the materials 'grid', 'other'; DMC-GB2 recolours "
        "material 1 ('self')"
    )


def test_video_modes_loads_the_colours_with_dmcgb2s_own_loader(easy, monkeypatch):
    loaded = []

    class Theirs:
        def __init__(self, env, mode, seed, video_render_size=256):
            raise AssertionError("the colour-video modes are mixshard's")

        def _load_colors(self):  # DMC-GB2's: `self._colors = torch.load(...)` by self._mode
            loaded.append(self._mode)
            self._colors = colours()

    monkeypatch.setenv("MIXSHARD_DATA", str(easy.parent))
    monkeypatch.setattr("mixshard.dmcgb2.suite_model", lambda domain: model())
    link = easy.parent / "dmcgb2-video_easy-8"
    link.exists() or link.symlink_to(easy)
    env = video_modes(Theirs)(Env(), "color_video_easy", 3, video_render_size=8)
    assert isinstance(env, ColorVideoWrapper) and loaded == ["color_video_easy"]
    assert env._colors is not None and len(env._colors) == 100
    env.close()
    with pytest.raises(MixshardError) as err:
        dmcgb2_colors(object, "color_video_hard")
    assert str(err.value) == (
        "'object' has no _load_colors, DMC-GB2's loader of the colours color_video_hard plays: "
        "make mixshard.dmcgb2.ColorVideoWrapper with colors="
    )


def test_a_step_before_the_first_reset_is_refused(easy):
    env, _ = wrapped(easy)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(None)
    env.close()
