"""`mixshard.maniskill.ManiSkillBackgrounds`: each parallel environment's own background where
ManiSkill's green screen pastes one, changed exactly at that environment's resets.

A fake ManiSkill env (pure torch, the same observation layout, `segmentation_id_map` and
partial resets) makes the exact-pixel tests run without ManiSkill; the last test runs the real
one on its CPU renderer where it is installed with a Vulkan driver (skipped otherwise).

The backgrounds are a tiny clip pack (`helpers.clip_pack`): a background pixel's red is its
clip, its green its frame, so each pixel says which background it shows.
"""

from __future__ import annotations

import pytest
import torch

gym = pytest.importorskip("gymnasium")

from helpers import clip_pack  # noqa: E402

import mixshard  # noqa: E402
from mixshard.maniskill import ManiSkillBackgrounds  # noqa: E402

H = W = 8
SCENE = 50  # the fake renderer's colour everywhere
# ids by column pair: 0 empty, 2 a static table, 1 a robot link, 3 a dynamic cube
COLUMNS = (0, 0, 2, 2, 1, 1, 3, 3)


class Part:
    """A ManiSkill actor (with a body type) or link (without), as the wrapper reads them."""

    def __init__(self, ident: int, body: str | None = None) -> None:
        self.per_scene_id = torch.tensor([ident], dtype=torch.int32)
        if body is not None:
            self.px_body_type = body


class Robot:
    def __init__(self, link: Part) -> None:
        self.links = [link]


class FakeManiSkill(gym.Env):
    """`num_envs` environments with one camera; episodes end where `ends` says."""

    def __init__(self, num_envs: int = 3, obs_mode: str = "rgb+segmentation", ends=()) -> None:
        spaces = gym.spaces
        cam = {"rgb": spaces.Box(0, 255, (H, W, 3), "uint8")}
        if "segmentation" in obs_mode:
            cam["segmentation"] = spaces.Box(-32768, 32767, (H, W, 1), "int16")
        sensors = spaces.Dict({"base_camera": spaces.Dict(cam)})
        self.single_observation_space = spaces.Dict({"sensor_data": sensors})
        self.observation_space = self.single_observation_space
        self.action_space = spaces.Box(-1, 1, (num_envs, 1))
        self.num_envs, self.obs_mode, self.device = num_envs, obs_mode, torch.device("cpu")
        self.ends, self.steps, self.offset = list(ends), 0, 0
        self.reconfigure(0)

    def reconfigure(self, offset: int) -> None:
        """A new scene whose ids are shifted by `offset` (ManiSkill makes a new map)."""
        self.offset = offset
        self.link, self.table = Part(1 + offset), Part(2 + offset, "static")
        self.cube = Part(3 + offset, "dynamic")
        self.segmentation_id_map = {1 + offset: self.link, 2 + offset: self.table}
        self.segmentation_id_map[3 + offset] = self.cube

    def obs(self) -> dict:
        rgb = torch.full((self.num_envs, H, W, 3), SCENE, dtype=torch.uint8)
        ids = torch.tensor([c and c + self.offset for c in COLUMNS], dtype=torch.int16)
        seg = ids.view(1, 1, W, 1).expand(self.num_envs, H, W, 1).clone()
        cam = {"rgb": rgb, "segmentation": seg} if "segmentation" in self.obs_mode else {"rgb": rgb}
        return {"sensor_data": {"base_camera": cam}}

    def reset(self, *, seed=None, options=None):
        return self.obs(), {}

    def step(self, action):
        self.steps += 1
        done = torch.zeros(self.num_envs, dtype=torch.bool)
        for env in self.ends[self.steps - 1] if self.steps <= len(self.ends) else ():
            done[env] = True
        return self.obs(), torch.zeros(self.num_envs), done, torch.zeros_like(done), {}


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return clip_pack(tmp_path_factory.mktemp("ms"), [5, 7, 6, 4, 9, 3], size=H)


def backgrounds(clips, n=3, **kwargs) -> mixshard.Backgrounds:
    kwargs = {"frames": 1, "seed": 5, **kwargs}
    return mixshard.Backgrounds(clips, n, **kwargs)


def shown(obs: dict) -> torch.Tensor:
    return obs["sensor_data"]["base_camera"]["rgb"]


def behind(bg: mixshard.Backgrounds, kept_columns) -> torch.Tensor:
    """What the wrapper must give: the scene in the kept columns, each env's background
    elsewhere."""
    want = bg.images().permute(0, 2, 3, 1).clone()
    want[:, :, list(kept_columns)] = SCENE
    return want


ROBOT_AND_CUBE = (4, 5, 6, 7)


def test_default_keeps_the_robot_and_what_moves_and_shows_each_envs_background(clips):
    bg = backgrounds(clips)
    env = ManiSkillBackgrounds(FakeManiSkill(), bg)
    obs, _ = env.reset(seed=0)
    assert torch.equal(shown(obs), behind(bg, ROBOT_AND_CUBE))
    reds = shown(obs)[:, 0, 0, 0]
    assert reds.tolist() == bg.clip.tolist() and len(set(reds.tolist())) > 1  # its own clip
    for _ in range(2):
        obs = env.step(None)[0]
        assert torch.equal(shown(obs), behind(bg, ROBOT_AND_CUBE))
    assert shown(obs)[:, 0, 0, 1].tolist() == bg.positions()[:, 0].tolist() == [2, 2, 2]


def test_a_partial_reset_changes_only_those_environments(clips):
    bg = backgrounds(clips)
    env = ManiSkillBackgrounds(FakeManiSkill(), bg)
    env.reset()
    before = shown(env.step(None)[0]).clone()
    obs, _ = env.reset(options={"env_idx": torch.tensor([1])})
    after = shown(obs)
    assert bg.episode.tolist() == [1, 2, 1]
    assert torch.equal(after[[0, 2]], before[[0, 2]])  # untouched: the same frame
    assert torch.equal(after, behind(bg, ROBOT_AND_CUBE))
    assert after[1, 0, 0, 1] == 0  # env 1 starts its new clip at its first frame


def test_same_step_autoresets_show_the_old_background_on_the_final_frame(clips):
    """As ManiSkillVectorEnv autoresets: step, keep the final observation, reset the done
    environments with `env_idx` through the wrapper."""
    bg = backgrounds(clips)
    env = ManiSkillBackgrounds(FakeManiSkill(ends=[(), (0, 2)]), bg)
    env.reset()
    for _ in range(2):
        obs, _, terminated, _, _ = env.step(None)
        final = {k: v.clone() for k, v in obs["sensor_data"]["base_camera"].items()}
        old_clip = bg.clip.clone()
        if terminated.any():
            obs, _ = env.reset(options={"env_idx": terminated.nonzero().flatten()})
    assert final["rgb"][:, 0, 0, :2].tolist() == [[c, 2] for c in old_clip.tolist()]
    assert bg.episode.tolist() == [2, 1, 2]
    assert torch.equal(shown(obs), behind(bg, ROBOT_AND_CUBE))
    assert shown(obs)[:, 0, 0, 1].tolist() == [0, 2, 0]


def test_keep_and_background_choose_the_pixels(clips):
    fake = FakeManiSkill()
    cases = [
        ({"background": [0]}, (2, 3, 4, 5, 6, 7)),  # only the empty background replaced
        ({"keep": [Robot(fake.link)]}, (4, 5)),  # an articulation keeps its links
        ({"keep": [3, fake.table]}, (2, 3, 6, 7)),  # ids and actors
        ({"keep": []}, ()),
    ]
    for kwargs, kept in cases:
        bg = backgrounds(clips)
        obs, _ = ManiSkillBackgrounds(fake, bg, **kwargs).reset()
        assert torch.equal(shown(obs), behind(bg, kept)), kwargs


def test_a_digital_twins_own_ids_are_the_default(clips):
    fake = FakeManiSkill()
    fake._segmentation_ids_to_keep = torch.tensor([2], dtype=torch.int32)
    bg = backgrounds(clips)
    obs, _ = ManiSkillBackgrounds(fake, bg).reset()
    assert torch.equal(shown(obs), behind(bg, (2, 3)))


def test_ids_are_read_again_after_a_reconfiguration(clips):
    fake = FakeManiSkill()
    bg = backgrounds(clips)
    env = ManiSkillBackgrounds(fake, bg)
    env.reset()
    fake.reconfigure(10)  # the robot is now id 11, the cube 13
    obs, _ = env.reset()
    assert env.kept_ids().tolist() == [11, 13]
    assert torch.equal(shown(obs), behind(bg, ROBOT_AND_CUBE))


def test_state_dict_restores_the_same_frames(clips):
    env = ManiSkillBackgrounds(FakeManiSkill(), backgrounds(clips))
    env.reset()
    env.step(None)
    env.reset(options={"env_idx": [2]})
    state = env.state_dict()
    want = shown(env.step(None)[0])
    other = ManiSkillBackgrounds(FakeManiSkill(), backgrounds(clips, seed=99))
    other.load_state_dict(state)
    assert torch.equal(shown(other.step(None)[0]), want)
    with pytest.raises(ValueError, match="state must be the list state_dict"):
        other.load_state_dict(state[0])


def test_bad_envs_and_arguments_are_refused_before_a_step(clips):
    bg = backgrounds(clips)
    cases = [
        (lambda: FakeManiSkill(obs_mode="rgb"), {}, ValueError, "no camera has both rgb and"),
        (FakeManiSkill, {"cameras": ["hand"]}, ValueError, "camera 'hand' is not one"),
        (FakeManiSkill, {"keep": [1.5]}, TypeError, "keep and background take ManiSkill"),
        (FakeManiSkill, {"keep": [1], "background": [0]}, ValueError, "not both"),
        (lambda: FakeManiSkill(4), {}, ValueError, "the env needs num_envs=4, frames=1"),
        (lambda: gym.make("CartPole-v1"), {}, TypeError, "must be a ManiSkill3 env"),
    ]
    for make, kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            ManiSkillBackgrounds(make(), bg, **kwargs).reset()
    with pytest.raises(ValueError, match="camera 'base_camera' gives \\['rgb'\\]"):
        ManiSkillBackgrounds(FakeManiSkill(obs_mode="rgb"), bg, cameras=["base_camera"])
    with pytest.raises(ValueError, match="frames=2, device=cpu; the env needs num_envs=3"):
        ManiSkillBackgrounds(FakeManiSkill(), backgrounds(clips, frames=2))

    class ManiSkillVectorEnv:  # what ManiSkill's vector env is: no gymnasium.Env
        pass

    with pytest.raises(TypeError, match=r"ManiSkillVectorEnv\(ManiSkillBackgrounds\(env, bg\)\)"):
        ManiSkillBackgrounds(ManiSkillVectorEnv(), bg)


# -- the real ManiSkill3, on its CPU renderer ---------------------------------------------------


def real_env(**kwargs):
    pytest.importorskip("mani_skill.envs")
    try:
        return gym.make(
            "PickCube-v1", obs_mode="rgb+segmentation", render_backend="cpu",
            sim_backend="physx_cpu", **kwargs,
        )  # fmt: skip
    except RuntimeError as exc:  # no Vulkan device: Mesa >= 24.3's lavapipe is needed
        pytest.skip(f"ManiSkill3 cannot render here: {exc}")


@pytest.mark.timeout(300)
def test_real_maniskill_keeps_the_robot_and_cube_and_autoresets(clips):
    """PickCube on the CPU (one env per process): the robot and the cube stay pixel for pixel,
    the rest shows the background, and ManiSkillVectorEnv's autoreset redraws it."""
    raw = real_env(num_envs=1, max_episode_steps=2)
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    first = raw.reset(seed=1)[0]["sensor_data"]["base_camera"]
    rgb, seg = first["rgb"].clone(), first["segmentation"]
    base = raw.unwrapped
    kept = torch.cat([*(x.per_scene_id for x in base.agent.robot.links), base.cube.per_scene_id])
    keep = torch.isin(seg, kept.to(seg.dtype))
    assert 0 < keep.float().mean() < 1
    bg = mixshard.Backgrounds(clips, 1, frames=1, seed=3)
    with pytest.warns(UserWarning, match="resizing on the device"):
        env = ManiSkillVectorEnv(ManiSkillBackgrounds(raw, bg))
        obs, _ = env.reset(seed=1)
    got = shown(obs)
    assert torch.equal(got[keep.expand_as(got)], rgb[keep.expand_as(rgb)])
    assert (got[~keep.expand_as(got)] != rgb[~keep.expand_as(rgb)]).any()
    for _ in range(2):
        env.step(env.action_space.sample() * 0)
    assert bg.episode.tolist() == [2]  # the reset, then the autoreset after two steps
    env.close()
