"""mixshard.augment.draws.mixing: the weighted pick of a pack, its weights and schedule; the numpy
twin of the keyed draws; a generator's compact state (genstate)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mixshard.augment.draws.keyed import keyed, keyed_np, keyed_numpy, mix64_int, seed_key
from mixshard.augment.draws.mixing import Mix, check_mix_weights, check_schedule, thresholds
from mixshard.augment.state.genstate import MAX_TWISTS, pack_states, twist, unpack_states

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_mixing import autocorrelation  # noqa: E402  (the benchmark's own, at a smaller size)


def test_keyed_np_gives_the_torch_bits():
    key = seed_key(11)
    envs = np.array([0, 1, 2, 5, 2**40, -3, 2**63 - 1], np.int64)
    for episode in (0, 1, 7, 2**62):
        got = keyed_np(key, envs, episode, 5).view(np.int64)
        want = keyed(key, torch.from_numpy(envs), torch.full((len(envs),), episode), 5)
        assert got.tolist() == want.tolist()
        # the numpy ops (no compiled module) and the Python reference give them too
        assert keyed_numpy(key, envs, episode, 5).view(np.int64).tolist() == got.tolist()
        words = [mix64_int(mix64_int(mix64_int(int(e) + key) + episode) + 5) for e in envs]
        assert got.view(np.uint64).tolist() == words


WEIGHTS = [
    [0.5, 0.5],
    [0.99, 0.01],
    [0.7, 0.2, 0.1],
    [0.25, 0.25, 0.25, 0.24, 0.01],
    [0.01, 0.01, 0.01, 0.01, 0.96],
]


@pytest.mark.parametrize("weights", WEIGHTS)
def test_realised_shares_match_the_weights_without_a_period(weights):
    mix = Mix(len(weights), weights)
    n = 200_000
    packs = mix.pick_np(keyed_np(seed_key(3), np.arange(n, dtype=np.int64), 0, 7))
    shares = np.bincount(packs, minlength=len(weights)) / n
    sigma = np.sqrt(np.array(weights) * (1 - np.array(weights)) / n)
    assert np.all(np.abs(shares - weights) < 0.005)  # the 0.5%: points of share
    assert np.all(np.abs(shares - weights) <= 4.5 * sigma)  # and within sampling noise
    for k in range(len(weights)):  # every pack's indicator: no lag up to 10^3 stands out
        acf = autocorrelation((packs == k).astype(np.float64), 1000)
        assert np.abs(acf).max() < 5 / np.sqrt(n), (k, int(np.abs(acf).argmax()) + 1)


def test_the_torch_and_numpy_picks_agree():
    mix = Mix(3, [0.2, 0.0, 0.8])
    bits = keyed(seed_key(1), torch.arange(10_000), torch.zeros(10_000, dtype=torch.int64), 7)
    picked = mix.pick(bits)
    assert picked.tolist() == mix.pick_np(bits.numpy().view(np.uint64)).tolist()
    assert 1 not in picked.tolist()  # a weight of 0 is never picked
    edges = torch.tensor([0, -1, 2**63 - 1, -(2**63), 2**32 - 1, 2**32, -(2**32)])
    for weights in ([1, 0], [0, 1], [1, 0, 0], [0.5, 0, 0.5], [2**-33, 1], [1, 2**-33]):
        mix = Mix(len(weights), weights)
        for words in (bits, edges):
            want = mix.pick_np(words.numpy().view(np.uint64)).tolist()
            assert mix.pick(words).tolist() == want, weights
            assert all(weights[k] > 0 for k in want), weights


def test_thresholds_are_exact_at_the_ends():
    assert thresholds(np.array([0.5, 0.5])).tolist() == [2**31, 2**32]
    assert thresholds(np.array([0.0, 1.0])).tolist() == [0, 2**32]


@pytest.mark.parametrize(
    "weights, error, message",
    [
        ([1, -0.5], ValueError, "weights[1] must be >= 0, got -0.5"),
        ([float("nan"), 1], ValueError, "weights[0] must be a finite number, got nan"),
        ([1, float("inf")], ValueError, "weights[1] must be a finite number, got inf"),
        ([0, 0.0], ValueError, "weights are all 0 ([0, 0.0]): give some pack a weight above 0"),
        ([1e308, 1e308], ValueError, "weights sum to inf ([1e+308, 1e+308]): scale them down"),
        ([1, 2, 3], ValueError, "weights has 3 values but 2 packs were given"),
        ("ab", TypeError, "weights must be a list of numbers, one per pack (2), got str"),
        ([1, "2"], TypeError, "weights[1] must be a number, got '2'"),
        ([True, 1], TypeError, "weights[0] must be a number, got True"),
    ],
)
def test_bad_weights_are_named(weights, error, message):
    with pytest.raises(error) as info:
        check_mix_weights(weights, 2)
    assert str(info.value) == message


def test_weights_are_shares():
    assert check_mix_weights([3, 1], 2).tolist() == [0.75, 0.25]
    assert check_mix_weights(torch.tensor([1.0, 1.0]), 2).tolist() == [0.5, 0.5]


def test_a_schedule_applies_each_entry_from_its_step():
    mix = Mix(2, None, [(0, [1, 0]), (3, [0, 1]), (5, [1, 1])])
    seen = []
    for _ in range(7):
        seen.append(mix.weights.tolist())
        mix.advance()
    assert seen == [[1, 0]] * 3 + [[0, 1]] * 2 + [[0.5, 0.5]] * 2
    mix = Mix(2, [1, 3], {2: [1, 0]})
    assert mix.weights.tolist() == [0.25, 0.75]
    mix.set_weights([0, 1])  # in force until the schedule's next entry
    mix.advance(2)
    assert mix.weights.tolist() == [1, 0]


@pytest.mark.parametrize(
    "schedule, error, message",
    [
        (
            [(10, [1, 0]), (5, [0, 1])],
            ValueError,
            "schedule steps must increase: schedule[1] is at step 5, after step 10",
        ),
        ([(3, [1, 0]), (3, [0, 1])], ValueError, "schedule[1] is at step 3, after step 3"),
        ([(-1, [1, 0])], ValueError, "schedule[0] step must be an integer >= 0, got -1"),
        ([(0, [1, -1])], ValueError, "schedule[0] weights[1] must be >= 0, got -1"),
        ([(0,)], TypeError, "schedule[0] must be a (step, weights) pair, got (0,)"),
        (5, TypeError, "schedule must be a list of (step, weights) pairs, got int"),
    ],
)
def test_bad_schedules_are_named(schedule, error, message):
    with pytest.raises(error) as info:
        check_schedule(schedule, 2)
    assert message in str(info.value)


def test_a_mix_state_round_trips_and_refuses_other_weights():
    mix = Mix(2, [1, 1], [(4, [0, 1])])
    mix.advance(2)
    mix.set_weights([3, 1])
    state = mix.state_dict()
    other = Mix(2, [1, 1], [(4, [0, 1])])
    other.load_state_dict(state)
    assert other.weights.tolist() == [0.75, 0.25] and other.step == 2
    other.advance(2)
    assert other.weights.tolist() == [0, 1]
    with pytest.raises(ValueError, match="saved with other weights= or schedule="):
        Mix(2, [1, 2], [(4, [0, 1])]).load_state_dict(state)


def test_the_twist_is_torchs():
    g = torch.Generator().manual_seed(9)
    before = g.get_state().numpy()[24:-40].view(np.uint64).astype(np.uint32)
    torch.rand(10, generator=g)  # a fresh seed's words are regenerated at the first draw
    after = g.get_state().numpy()[24:-40].view(np.uint64).astype(np.uint32)
    assert np.array_equal(twist(before), after)


def test_a_cpu_generators_states_pack_small_and_exactly():
    g = torch.Generator().manual_seed(4)
    then = g.get_state()
    torch.randperm(5000, generator=g)
    torch.rand(10_001, generator=g)
    now = g.get_state()
    packed = pack_states(then, now)
    assert len(packed["then"]) == 2560 and len(packed["now"]) == 64 and packed["twists"] > 5
    back_then, back_now = unpack_states(packed)
    assert torch.equal(back_then, then) and torch.equal(back_now, now)
    alone = pack_states(None, now)
    assert len(alone["now"]) == 2560 and torch.equal(unpack_states(alone)[1], now)
    assert MAX_TWISTS >= 1 << 20
    with pytest.raises(ValueError, match="not a packed generator state"):
        unpack_states({"then": None})


@pytest.mark.parametrize("weights", [[1.0], *WEIGHTS])
def test_mixed_clips_compiled_give_the_tensor_ops_bits(weights, monkeypatch):
    """A CPU's one compiled loop (`_lerp.mixed`) and the tensor ops every other device runs
    give the same clip for each (environment, episode), and each clip lies in its pack's
    first `limit`, the pack the numpy pick gives."""
    from mixshard.augment.draws import playback

    if playback._lerp is None:
        pytest.skip("mixshard.augment.kernels._lerp is not built")
    mix, packs = Mix(len(weights), weights), len(weights)
    g = torch.Generator().manual_seed(packs)
    limit = torch.randint(1, 9, (packs,), generator=g)
    base = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.int64), limit[:-1] + 3]), 0)
    envs = torch.arange(3000)
    episode = torch.randint(0, 2**40, (3000,), generator=g)
    key = seed_key(packs)
    compiled = playback.mixed_clips(key, envs, episode, mix, base, limit)
    monkeypatch.setattr(playback, "_lerp", None)
    assert torch.equal(compiled, playback.mixed_clips(key, envs, episode, mix, base, limit))
    bits = keyed(key, envs, episode, playback._PACK).numpy().view(np.uint64)
    pack = torch.from_numpy(mix.pick_np(bits))
    assert torch.all(compiled >= base[pack]) and torch.all(compiled < base[pack] + limit[pack])
