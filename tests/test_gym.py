"""`mixshard.gym`: a background per environment of a gymnasium env, changed exactly where the
environment's episode does (issue 47 §3, §5).

The environments are tiny pure-Python `gymnasium.Env`s (`Stripes`) under gymnasium's own
`SyncVectorEnv`, with episodes that end at set steps, so every autoreset mode runs without a
simulator; a real MuJoCo env runs where gymnasium[mujoco] and an OpenGL are installed. Each
observation's left half says which environment, episode and step it is; its right half is black
and keyed out, so after the wrapper it shows the background, whose pixels say which clip (red)
and which frame (green) it is (`helpers.clip_pack`).
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import clip_pack

import mixshard
from mixshard.augment.draws.keyed import seed_key
from mixshard.augment.draws.playback import draw_clips

gym = pytest.importorskip("gymnasium")
from gymnasium.spaces import Box, Dict, Discrete  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from mixshard.gym import BackgroundWrapper, VectorBackgroundWrapper  # noqa: E402

SIZE = 8
CLIPS = [20, 21, 22, 23, 24]  # longer than any episode: a background's frame is its step
# the episodes' lengths of each environment, in turn: env 0 ends at steps 3, 5, 9, ...
LENGTHS = [[3, 2, 4], [6], [2, 2, 5], [4, 1]]


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    return clip_pack(tmp_path_factory.mktemp("gym"), CLIPS, size=SIZE)


class Stripes(gym.Env):
    """`(8, 8, 3)` uint8 images: the left half (100 + index, step, episode), the right half
    black; episode `k` lasts `lengths[k % len(lengths)]` steps, terminated and truncated in
    turn. `dict_obs`: the image under "pixels", beside a "state" vector."""

    metadata: dict = {"render_modes": []}

    def __init__(self, index: int = 0, lengths: list[int] | None = None, dict_obs: bool = False):
        image = Box(0, 255, (SIZE, SIZE, 3), np.uint8)
        state = Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = Dict({"pixels": image, "state": state}) if dict_obs else image
        self.action_space = Discrete(2)
        self.index, self.lengths, self.dict_obs = index, lengths or [3], dict_obs
        self.episode, self.t, self.steps = -1, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.steps += 1
        end = self.t >= self.lengths[self.episode % len(self.lengths)]
        return self._obs(), 0.0, end and self.episode % 2 == 0, end and self.episode % 2 == 1, {}

    def _obs(self):
        image = np.zeros((SIZE, SIZE, 3), np.uint8)
        image[:, : SIZE // 2] = (100 + self.index, self.t, self.episode)
        if self.dict_obs:
            return {"pixels": image, "state": np.full(2, 0.5, np.float32)}
        return image


def keep_left(obs, info):
    """The keep mask of a Stripes batch: its non-black pixels (numpy, `(N, H, W)`)."""
    return (obs != 0).any(-1)


def vector(mode: str = "NextStep", n: int = 4, dict_obs: bool = False) -> SyncVectorEnv:
    fns = [functools.partial(Stripes, i, LENGTHS[i % 4], dict_obs) for i in range(n)]
    return SyncVectorEnv(fns, autoreset_mode=AutoresetMode(mode))


def read(image: np.ndarray, seed: int = 0, order: str = "next") -> list[tuple[int, int, int]]:
    """Per environment of an `(N, H, W, 3)` batch: (episode, step, clip shown), checking that
    the left half is the environment's own and that the background is the frame of that step
    of the clip `Backgrounds` draws for (seed, environment, episode)."""
    out = []
    for e, row in enumerate(image):
        index, step, episode = (int(v) for v in row[0, 0])
        clip, frame, _ = (int(v) for v in row[0, -1])
        assert index == 100 + e and (row[:, : SIZE // 2] == row[0, 0]).all()
        want = draw_clips(seed_key(seed), torch.tensor([e]), torch.tensor([episode]), 5, order)
        assert (clip, frame) == (int(want), step), (e, episode, step)
        out.append((episode, step, clip))
    return out


def changed(before: list, after: list) -> set[int]:
    """The environments whose background clip changed."""
    return {e for e, (b, a) in enumerate(zip(before, after)) if b[2] != a[2]}


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_a_background_changes_exactly_where_its_environments_episode_does(pack, mode):
    """Env 0's episodes end at steps 3, 5 and 9 (NEXT_STEP: 3, 6 and 11, its reset steps
    taking one each), env 2's at 2, 4, 9: with NEXT_STEP a background changes at the step
    that returns the reset observation, with SAME_STEP at the step that ends the episode (the
    final observation keeping the ended episode's background), with DISABLED at the caller's
    reset; the clips play one frame a step, and nobody else's background changes."""
    bg = mixshard.Backgrounds(pack, 4, frames=1, clip_order="next")
    envs = VectorBackgroundWrapper(vector(mode), bg, keep_left)
    assert envs.autoreset_mode == AutoresetMode(mode)
    obs, _ = envs.reset(seed=0)
    last = read(obs)
    assert [(episode, step) for episode, step, _ in last] == [(0, 0)] * 4
    assert [clip for _, _, clip in last] == [(last[0][2] + e) % 5 for e in range(4)]
    changes = {}
    for t in range(1, 11):
        obs, _, term, trunc, info = envs.step(np.zeros(4, np.int64))
        now, done = read(obs), term | trunc
        if mode == "SameStep" and done.any():
            finals = obs.copy()
            finals[done] = np.stack(list(info["final_obs"][done]))
            for e, (episode, step, clip) in enumerate(read(finals)):
                if done[e]:  # the ended episode, its last step, its clip
                    assert (episode, step, clip) == (last[e][0], last[e][1] + 1, last[e][2])
        if mode == "Disabled" and done.any():
            assert read(obs) == [(ep, step + 1, clip) for ep, step, clip in last]
            obs, _ = envs.reset(options={"reset_mask": done})
            now = read(obs)
        if changed(last, now):
            changes[t] = changed(last, now)
        last = now
    if mode == "NextStep":
        assert changes == {3: {2}, 4: {0}, 5: {3}, 6: {2}, 7: {0, 1, 3}}
    else:
        assert changes == {2: {2}, 3: {0}, 4: {2, 3}, 5: {0, 3}, 6: {1}, 9: {0, 2, 3}, 10: {3}}


def test_a_dict_observation_keeps_its_other_keys_and_a_builder_makes_the_mask(pack):
    """The image under `key` gets the backgrounds (a `mixshard.masks` builder keys out its
    black), the other keys come back as they were; SAME_STEP's final observations, dicts
    too, keep the ended episode's background."""
    keep_black_out = functools.partial(mixshard.masks.color_key, rgb=(0, 0, 0))
    bg = mixshard.Backgrounds(pack, 4, frames=1, clip_order="next", seed=5)
    envs = VectorBackgroundWrapper(
        vector("SameStep", dict_obs=True), bg, keep_black_out, key="pixels"
    )
    obs, _ = envs.reset(seed=1)
    last = read(obs["pixels"], seed=5)
    for _ in range(6):
        obs, _, term, trunc, info = envs.step(np.zeros(4, np.int64))
        assert set(obs) == {"pixels", "state"} and (obs["state"] == 0.5).all()
        now = read(obs["pixels"], seed=5)
        for e in np.flatnonzero(term | trunc):
            final = info["final_obs"][e]
            assert set(final) == {"pixels", "state"}
            assert tuple(final["pixels"][0, -1, :2]) == (last[e][2], last[e][1] + 1)
            assert now[e][:2] == (last[e][0] + 1, 0)
        last = now


def test_a_key_makes_the_mask_in_the_composites_pass_as_the_callable_would(pack):
    """A colour key as the mask, or a callable returning a key of the step's ids, gives the
    bytes of the callable's bool mask (the key is made inside the composite's pass)."""

    def ids(obs, info):  # the step's segmentation: id 1 where the agent is (not black)
        return mixshard.keys.from_segmentation(keep_left(obs, info).astype(np.int32), [1])

    runs = {}
    for name, mask in [
        ("callable", keep_left),
        ("colour key", mixshard.keys.color_key((0, 0, 0))),
        ("ids key", ids),
    ]:
        bg = mixshard.Backgrounds(pack, 4, frames=1, clip_order="next", seed=2)
        envs = VectorBackgroundWrapper(vector(), bg, mask)
        got = [envs.reset(seed=0)[0]]
        got += [envs.step(np.zeros(4, np.int64))[0] for _ in range(6)]
        runs[name] = np.stack(got)
    read(runs["callable"][-1], seed=2)
    assert np.array_equal(runs["colour key"], runs["callable"])
    assert np.array_equal(runs["ids key"], runs["callable"])


def test_one_environment_gets_a_new_background_at_each_reset(pack):
    """`BackgroundWrapper` around one `gymnasium.Env`: the first reset plays episode 0, each
    later one the next episode, and the clip plays one frame a step."""
    bg = mixshard.Backgrounds(pack, 1, frames=1, clip_order="next", seed=2)
    env = BackgroundWrapper(Stripes(0, [3, 2]), bg, mask=lambda obs, info: obs[..., 0] != 0)
    seen = []
    obs, _ = env.reset(seed=0)
    seen.append(read(obs[None], seed=2)[0])
    for _ in range(7):
        obs, _, term, trunc, _ = env.step(0)
        seen.append(read(obs[None], seed=2)[0])
        if term or trunc:
            obs, _ = env.reset()
            seen.append(read(obs[None], seed=2)[0])
    episodes = [(episode, step) for episode, step, _ in seen]
    assert episodes == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1),
                        (2, 2)]  # fmt: skip
    assert len({clip for _, _, clip in seen}) == 3  # (clip_order="next": each a new one)
    state = env.state_dict()
    assert set(state) == {"backgrounds", "started"}


def test_a_saved_state_shows_the_same_frames_mid_episode(pack):
    """Saved at step 5 (mid-episode for envs 0, 1 and 3; env 2's episode just ended: its
    background changes at the next step), loaded into a fresh wrapper of another seed around
    an environment at the same step: the same frames from there on."""
    kwargs = {"frames": 1, "playback": "random", "clip_order": "no-repeat", "flip": True}
    a = VectorBackgroundWrapper(
        vector(), mixshard.Backgrounds(pack, 4, seed=3, **kwargs), keep_left
    )
    a.reset(seed=0)
    for _ in range(5):
        a.step(np.zeros(4, np.int64))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    assert a.state_dict()["pending"].tolist() == [False, False, True, False]
    went_on = [a.step(np.zeros(4, np.int64))[0] for _ in range(5)]
    for pending in (True, False):
        raw = vector()
        raw.reset(seed=0)
        for _ in range(5):
            raw.step(np.zeros(4, np.int64))
        b = VectorBackgroundWrapper(raw, mixshard.Backgrounds(pack, 4, seed=0, **kwargs), keep_left)
        buf.seek(0)
        state = torch.load(buf)
        if not pending:  # without it, env 2 would keep its ended episode's background
            state["pending"][:] = False
        b.load_state_dict(state)
        again = [b.step(np.zeros(4, np.int64))[0] for _ in range(5)]
        differ = {e for x, y in zip(went_on, again) for e in range(4) if (x[e] != y[e]).any()}
        assert differ == (set() if pending else {2})
    with pytest.raises(ValueError, match=r"state must be the wrapper's state_dict\(\)"):
        b.load_state_dict(b.backgrounds.state_dict())
    with pytest.raises(ValueError, match=r"state\['pending'\] must be a bool tensor of shape"):
        b.load_state_dict({**b.state_dict(), "pending": torch.zeros(3, dtype=torch.bool)})


class TorchStripes(gym.vector.VectorEnv):
    """A vector env of our own handing out torch tensors, as GPU simulators do: 3 `Stripes`
    stepped together, autoresetting SAME_STEP (declared as a string, as a vector env may)."""

    metadata: dict = {"autoreset_mode": "SameStep"}

    def __init__(self):
        self.envs = [Stripes(i, LENGTHS[i]) for i in range(3)]
        self.num_envs = 3
        self.single_observation_space = self.envs[0].observation_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 3)
        self.single_action_space = self.envs[0].action_space
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 3)

    def reset(self, *, seed=None, options=None):
        return torch.from_numpy(np.stack([e.reset()[0] for e in self.envs])), {}

    def step(self, actions):
        out = [e.step(0) for e in self.envs]
        done = np.array([o[2] or o[3] for o in out])
        finals = np.full(3, None, dtype=object)
        obs = [o[0] for o in out]
        for i in np.flatnonzero(done):
            finals[i], obs[i] = obs[i], self.envs[i].reset()[0]
        flags = [torch.tensor([o[k] for o in out]) for k in (2, 3)]
        info = {"final_obs": finals} if done.any() else {}
        return torch.from_numpy(np.stack(obs)), torch.zeros(3), *flags, info


def test_a_vector_env_of_torch_tensors_gets_torch_tensors_back(pack):
    bg = mixshard.Backgrounds(pack, 3, frames=1, clip_order="next")
    keep = lambda obs, info: obs[..., 0] != 0  # noqa: E731  (a torch mask of torch obs)
    envs = VectorBackgroundWrapper(TorchStripes(), bg, keep)
    assert envs.autoreset_mode == AutoresetMode.SAME_STEP
    obs, _ = envs.reset()
    last = read(obs.numpy())
    for t in range(1, 5):
        obs, _, term, trunc, info = envs.step(None)
        assert isinstance(obs, torch.Tensor) and obs.dtype == torch.uint8
        now = read(obs.numpy())
        assert changed(last, now) == {1: set(), 2: {2}, 3: {0}, 4: {2}}[t]  # as SyncVectorEnv
        for e in np.flatnonzero((term | trunc).numpy()):  # the ended episode's clip, last frame
            assert info["final_obs"][e][0, -1, :2].tolist() == [last[e][2], last[e][1] + 1]
        last = now
    bogus = TorchStripes()
    bogus.metadata = {"autoreset_mode": "Whenever"}
    with pytest.raises(
        ValueError, match="metadata\\['autoreset_mode'\\] is 'Whenever', not one of"
    ):
        VectorBackgroundWrapper(bogus, bg, keep)


def test_bad_input_is_named_before_any_environment_is_stepped(pack):
    """Issue 47 §5: each is one error naming what was given and what is expected, at
    construction, or (a mask's shape) at the first reset, before any step."""
    bg4 = mixshard.Backgrounds(pack, 4, frames=1)
    cartpole = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    with pytest.raises(
        ValueError,
        match=r"CartPole-v1's observations are Box\(.*\(4,\), float32\), not images \(H, W, 3\) "
        r"uint8 or float 0..255: render them with gymnasium.wrappers.AddRenderObservation",
    ):
        VectorBackgroundWrapper(cartpole, bg4, keep_left)
    pixels = vector(dict_obs=True)
    with pytest.raises(
        ValueError, match=r"observations are a dict \('pixels', 'state'\): pass key="
    ):
        VectorBackgroundWrapper(pixels, bg4, keep_left)
    with pytest.raises(
        ValueError, match=r"key='rgb' is not an observation of SyncVectorEnv: it has 'pixels', 'st"
    ):
        VectorBackgroundWrapper(pixels, bg4, keep_left, key="rgb")
    with pytest.raises(ValueError, match=r"observations \['state'\] are Box\(-1.0, 1.0, \(2,\)"):
        VectorBackgroundWrapper(pixels, bg4, keep_left, key="state")
    with pytest.raises(ValueError, match="key='pixels' picks the image of dict observations, but"):
        VectorBackgroundWrapper(vector(), bg4, keep_left, key="pixels")
    with pytest.raises(ValueError, match=r"backgrounds has num_envs=4, SyncVectorEnv has 2 env"):
        VectorBackgroundWrapper(vector(n=2), bg4, keep_left)
    with pytest.raises(ValueError, match=r"single frames \(H, W, 3\): .*frames=1, got frames=3"):
        VectorBackgroundWrapper(vector(), mixshard.Backgrounds(pack, 4, frames=3), keep_left)
    with pytest.raises(TypeError, match="backgrounds must be a mixshard.Backgrounds, got str"):
        VectorBackgroundWrapper(vector(), str(pack), keep_left)
    with pytest.raises(TypeError, match="mask must be None, a mixshard.masks builder, a mixsh"):
        VectorBackgroundWrapper(vector(), bg4, torch.ones(4, SIZE, SIZE, dtype=torch.bool))
    seg = torch.zeros(4, SIZE, SIZE, dtype=torch.int16)
    with pytest.raises(TypeError, match="mask=Segmentation key holds one map, not each step's"):
        VectorBackgroundWrapper(vector(), bg4, mixshard.keys.from_segmentation(seg, [1]))
    with pytest.raises(TypeError, match="mask=from_segmentation builds masks from seg, not from"):
        VectorBackgroundWrapper(vector(), bg4, mixshard.masks.from_segmentation)
    with pytest.raises(TypeError, match="wraps a gymnasium.vector.VectorEnv, got Stripes"):
        VectorBackgroundWrapper(Stripes(), bg4, keep_left)
    with pytest.raises(TypeError, match="BackgroundWrapper wraps one gymnasium.Env, got SyncVec"):
        BackgroundWrapper(vector(), mixshard.Backgrounds(pack, 1, frames=1), keep_left)
    for mask, given in [
        (lambda obs, info: keep_left(obs, info)[:, None], r"\(4, 1, 8, 8\) torch.bool"),
        (lambda obs, info: keep_left(obs, info)[:2], r"\(2, 8, 8\) torch.bool"),
        (lambda obs, info: keep_left(obs, info).astype(np.uint8), r"\(4, 8, 8\) torch.uint8"),
        (lambda obs, info: keep_left(obs, info).tolist(), "list"),
    ]:
        raw = vector()
        envs = VectorBackgroundWrapper(raw, bg4, mask)
        with pytest.raises(
            ValueError,
            match=f"mask returned {given} for SyncVectorEnv's observations "
            r"\(4, 8, 8, 3\): a keep mask is \(4, 8, 8\) or \(4, 8, 8, 1\), bool or float",
        ):
            envs.reset(seed=0)
        assert [e.steps for e in raw.envs] == [0] * 4
    single = BackgroundWrapper(
        Stripes(), mixshard.Backgrounds(pack, 1, frames=1), lambda obs, info: obs[None]
    )
    with pytest.raises(ValueError, match=r"a keep mask is \(8, 8\) or \(8, 8, 1\)"):
        single.reset()


def test_mixshard_imports_no_gymnasium_and_says_which_extra_it_needs(monkeypatch):
    """Only `mixshard.gym` and `mixshard.maniskill` (whose extra brings gymnasium) import
    gymnasium: `import mixshard` (and every other module) works without the extra."""
    import ast
    import importlib
    import sys

    package = Path(mixshard.__file__).parent
    importers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                base = ("mixshard." if node.level else "") + (node.module or "")
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            if any(n.split(".")[0] == "gymnasium" or n.endswith(".gym") for n in names):
                importers.add(path.relative_to(package).as_posix())
    assert importers == {"gym.py", "maniskill.py"}  # (ManiSkill's own extra brings gymnasium)
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # as where it is not installed
    monkeypatch.delitem(sys.modules, "mixshard.gym")
    with pytest.raises(ImportError, match=r"pip install 'mixshard\[gymnasium\]'"):
        importlib.import_module("mixshard.gym")


# Mesa's OpenGL (llvmpipe, under EGL or OSMesa) loads its LLVM into the process at the first
# render, and triton, imported with torch._dynamo (as making a torch.optim optimizer does),
# brings another whose static constructors then crash the process (segmentation fault in
# libtriton's PassBuilder): the renders run in a process of their own.
REAL_ENV = """
import os, pathlib, sys
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
sys.path.insert(0, sys.argv[3])
import test_gym
for name in sys.argv[4:]:
    getattr(test_gym, name)(pathlib.Path(sys.argv[1]) / name, int(sys.argv[2]))
"""
NO_RENDER = 77  # the exit status of a process where MuJoCo cannot render


def in_a_process(checks: list, tmp_path: Path, num_envs: int) -> None:
    """Each `check(tmp_path / name, num_envs)` of this module, in one fresh process (skipped
    where gymnasium[mujoco] or an OpenGL is missing)."""
    import subprocess
    import sys

    pytest.importorskip("mujoco")
    tests = str(Path(__file__).parent)
    names = [check.__name__ for check in checks]
    args = [sys.executable, "-c", REAL_ENV, str(tmp_path), str(num_envs), tests, *names]
    # (in tmp_path: MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working folder)
    res = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    if res.returncode == NO_RENDER:
        pytest.skip(res.stdout.strip())
    assert res.returncode == 0, res.stderr[-4000:]


def pendulums(num_envs: int):
    """Real MuJoCo InvertedPendulum-v5 envs rendering 32 x 32, reset (seed 0)."""
    import sys

    render = functools.partial(gym.wrappers.AddRenderObservation, render_only=True)
    try:
        envs = gym.make_vec(
            "InvertedPendulum-v5", num_envs=num_envs, vectorization_mode="sync",
            wrappers=[render], render_mode="rgb_array", width=32, height=32,
        )  # fmt: skip
        envs.reset(seed=0)
    except Exception as exc:  # no OpenGL here: what a machine without one says
        print(f"MuJoCo cannot render here: {type(exc).__name__}: {exc}")
        sys.exit(NO_RENDER)
    return envs


def pendulum_backgrounds(tmp_path: Path, num_envs: int) -> None:
    """InvertedPendulum-v5's sky is black: with it keyed out, every black pixel shows the
    frame of its environment's clip (read off the pixels) that its step in its episode
    (counted from the flags, NEXT_STEP) and its episode (clip_order="next") say, and every
    other pixel is the render's own."""
    pack = clip_pack(tmp_path, [40, 41, 42], size=32)
    bg = mixshard.Backgrounds(pack, num_envs, frames=1, clip_order="next", seed=7)
    raw = []

    def keep(obs, info):
        raw.append(obs.copy())
        return (obs != 0).any(-1)

    envs = VectorBackgroundWrapper(pendulums(num_envs), bg, keep)
    obs, _ = envs.reset(seed=0)
    episode, step = np.zeros(num_envs, int), np.zeros(num_envs, int)
    pending = np.zeros(num_envs, bool)
    ends = 0
    for t in range(30):
        if t:
            obs, _, term, trunc, _ = envs.step(np.full((num_envs, 1), 0.5, np.float32))
            episode, step = episode + pending, np.where(pending, 0, step + 1)
            pending = term | trunc
            ends += int(pending.sum())
        black = (raw[-1] == 0).all(-1)
        assert black.mean() > 0.5 and (obs[~black] == raw[-1][~black]).all()
        for e in range(num_envs):
            want = draw_clips(seed_key(7), torch.tensor([e]), torch.tensor([episode[e]]), 3, "next")
            shown = obs[e][black[e]]
            assert (shown[:, 0] == int(want)).all() and (shown[:, 1] == step[e]).all()
    assert ends >= 2  # (a pushed pendulum falls within 30 steps)
    envs.close()


def test_readme_wraps_a_vector_env(tmp_path):
    """The README's wrapper, on 4 real pendulums at 32 px (the README's: 8 at 84 px), then
    every pixel of a run on them checked (one process for both: a MuJoCo process starts
    slowly)."""
    in_a_process([readme_wrapper, pendulum_backgrounds], tmp_path, 4)


def readme_wrapper(tmp_path: Path, num_envs: int) -> None:
    """The README's wrapper: the render's black sky shows each environment's clip, which
    changes at some reset."""
    pack = clip_pack(tmp_path, [9, 10, 11, 12], size=32)
    envs = pendulums(num_envs)
    bg = mixshard.Backgrounds(pack, envs.num_envs, frames=1, clip_order="no-repeat")
    envs = VectorBackgroundWrapper(envs, bg, mask=mixshard.keys.color_key((0, 0, 0)))
    obs, info = envs.reset(seed=0)
    shown = [obs[:, 0, 0, 0].tolist()]  # the top-left corner is sky
    for _ in range(25):
        obs, *_ = envs.step(np.full((num_envs, 1), -0.5, np.float32))
        assert obs.shape == (num_envs, 32, 32, 3) and obs.dtype == np.uint8
        shown.append(obs[:, 0, 0, 0].tolist())
    clips = np.array(shown).T  # per environment, its clip at each step
    assert (np.diff(clips, axis=1) != 0).any()  # some reset, onto another clip
    envs.close()
