"""mixshard.Overlay over several packs by weight, and its state: after a restore the next
batches are an uninterrupted run's, byte for byte, in the device and stream caches."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import make_flat, small_pack

import mixshard
from mixshard.augment.kernels import ops
from mixshard.augment.state import overlaystate


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> tuple[Path, Path]:
    """Two packs of 8 px images, none in both: 48 and 30 (blocks of 8)."""
    root = tmp_path_factory.mktemp("ovmix")
    a = small_pack(root / "a", 24, shard_size=16, block_size=8)
    make_flat(root / "flat", n=30, ext=".png")
    mixshard.pack(root / "flat", root / "b", size=8, block_size=8, workers=1, labels="none")
    return a, root / "b"


def images_of(pack: Path) -> set[bytes]:
    ov = mixshard.Overlay(pack, cache="device", flip=False)
    return {img.numpy().tobytes() for img in ov.sample(ov.count)}


def run(ov: mixshard.Overlay, calls: int, start: int = 0) -> list[torch.Tensor]:
    """`calls` calls of 5-9 observations each (a batch's size changes), blended."""
    return [ov(torch.full((5 + t % 5, 6, 8, 8), 90.0)) for t in range(start, start + calls)]


KW = dict(alpha=(0.2, 0.9), crop=(0.5, 1.0), seed=4, num_workers=1, batch_size=16)


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("cache", ["device", "stream", "pool"])
def test_a_state_resumes_byte_for_byte_mid_epoch(packs, cache, mixed):
    """Mid-epoch, and for pools (16 images drawn twice each) mid-pool."""
    source = list(packs) if mixed else packs[0]
    kw = dict(KW, cache=cache, weights=[0.7, 0.3] if mixed else None, pool=16, uses=2)
    ov = mixshard.Overlay(source, **kw)
    states, batches = [], []
    for t in range(0, 40, 8):  # 8 calls of ~7: past an epoch of 48 (and of 30) images
        states.append(ov.state_dict())
        batches += run(ov, 8, t)
    for k in (1, 2, 4):
        again = mixshard.Overlay(source, **kw)
        again.load_state_dict(states[k])
        got = run(again, 40 - 8 * k, 8 * k)
        assert all(torch.equal(a, b) for a, b in zip(got, batches[8 * k :]))
        assert len(got) == len(batches[8 * k :])
        again.close()
    ov.close()


def test_a_state_is_under_4_kb(packs):
    for source, weights in ((packs[0], None), (list(packs), [1, 1])):
        ov = mixshard.Overlay(source, cache="device", weights=weights, **KW)
        run(ov, 12)
        assert len(pickle.dumps(ov.state_dict())) <= 4096
        ov.close()


@pytest.mark.parametrize("sizes", ["one", "several"])
def test_a_pool_resumes_byte_for_byte_mid_pool(packs, sizes):
    """A pool of 16 images drawn twice each: refilled every few calls, across the refill
    stream's epochs; the state replays the calls' sizes."""
    kw = dict(KW, cache="pool", pool=16, uses=2)
    ov = mixshard.Overlay(packs[0], **kw)

    def calls(o: mixshard.Overlay, count: int, start: int) -> list[torch.Tensor]:
        n = (lambda t: 8) if sizes == "one" else (lambda t: 5 + t % 5)
        return [o(torch.full((n(t), 6, 8, 8), 90.0)) for t in range(start, start + count)]

    states, batches = [], []
    for t in range(0, 40, 8):
        states.append(ov.state_dict())
        batches += calls(ov, 8, t)
    assert states[3]["devices"]["cpu"]["caches"][0]["calls"] == (
        [[8, 24]] if sizes == "one" else [[5 + t % 5, 1] for t in range(24)]
    )
    for k in (1, 3):
        again = mixshard.Overlay(packs[0], **kw)
        again.load_state_dict(states[k])
        got = calls(again, 40 - 8 * k, 8 * k)
        assert len(got) == len(batches[8 * k :])
        assert all(torch.equal(a, b) for a, b in zip(got, batches[8 * k :]))
        assert again.stats()["cpu"]["draws"] == ov.stats()["cpu"]["draws"]
        again.close()
    assert len(pickle.dumps(states[-1])) <= 4096
    ov.close()


def test_a_pool_refuses_a_state_it_cannot_keep(packs):
    ov = mixshard.Overlay(packs[0], cache="pool", pool=16)
    for n in range(1, 67):  # 66 runs of call sizes
        ov.sample(n % 3 + 1)
    with pytest.raises(ValueError) as info:
        ov.state_dict()
    assert str(info.value) == (
        "state_dict: a pool's state is its calls' sizes, which changed 66 times (at most 64 "
        "keep it under 4 KB); call it with one batch size, or use cache='device' or "
        "cache='stream'"
    )
    ov.close()


def test_a_samples_pack_does_not_depend_on_its_batch(packs):
    one = mixshard.Overlay(list(packs), weights=[0.5, 0.5], cache="device", flip=False)
    two = mixshard.Overlay(list(packs), weights=[0.5, 0.5], cache="device", flip=False)
    whole = one.sample(60)
    assert torch.equal(whole, torch.cat([two.sample(13), two.sample(40), two.sample(7)]))
    a, b = images_of(packs[0]), images_of(packs[1])
    mine = [img.numpy().tobytes() in b for img in whole]
    assert all(img.numpy().tobytes() in a or img.numpy().tobytes() in b for img in whole)
    assert 15 < sum(mine) < 45


def test_weights_and_schedules_choose_the_packs(packs):
    b = images_of(packs[1])
    schedule = [(0, [1, 0]), (2, [0, 1])]
    ov = mixshard.Overlay(list(packs), cache="device", schedule=schedule, flip=False)
    shown = [[img.numpy().tobytes() in b for img in ov.sample(10)] for _ in range(4)]
    assert [sum(s) for s in shown] == [0, 0, 10, 10]
    ov.set_weights([1, 0])
    assert sum(img.numpy().tobytes() in b for img in ov.sample(10)) == 0
    assert ov.weights == [1.0, 0.0]
    state = ov.state_dict()
    assert state["mix"]["weights"] == [1.0, 0.0] and state["mix"]["step"] == 5


def test_shares_over_many_samples_follow_the_weights(packs):
    ov = mixshard.Overlay(list(packs), cache="device", weights=[0.9, 0.1], flip=False)
    cache = ov._state(torch.device("cpu")).cache
    picks = cache.picks(100_000)
    assert abs(np.mean(picks == 0) - 0.9) < 4.5 * np.sqrt(0.09 / 100_000)


def test_a_state_from_elsewhere_is_refused(packs, monkeypatch):
    ov = mixshard.Overlay(packs[0], cache="device", seed=1)
    run(ov, 3)
    state = ov.state_dict()
    with pytest.raises(ValueError, match=r"saved with packs=\[\[48, 8\]\], this Overlay has"):
        mixshard.Overlay(packs[1], cache="device", seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with seed=1, this Overlay has seed=2"):
        mixshard.Overlay(packs[0], cache="device", seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with cache='device' on cpu, this Overlay has"):
        mixshard.Overlay(packs[0], cache="stream", seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with no weights="):
        mixshard.Overlay([packs[0]], weights=[1], seed=1).load_state_dict(state)
    monkeypatch.setattr(overlaystate, "rank_world", lambda: (0, 2))
    with pytest.raises(ValueError) as info:
        mixshard.Overlay(packs[0], cache="device", seed=1).load_state_dict(state)
    assert "'world_size': 1" in str(info.value) and "'world_size': 2" in str(info.value)
    assert str(info.value).endswith("its DataLoader worker): load it in the same one")
    with pytest.raises(TypeError, match="state must be a dict from state_dict"):
        ov.load_state_dict([])


def test_bad_mixes_are_named(packs, tmp_path):
    big = small_pack(tmp_path, 4, shard_size=16, block_size=8)
    mixshard.pack(tmp_path / "src", tmp_path / "big16", size=16, workers=1)
    with pytest.raises(ValueError, match="is 8 px, pack 1 .* is 16 px: repack it at 8 px"):
        mixshard.Overlay([packs[0], tmp_path / "big16"], weights=[1, 1])
    with pytest.raises(ValueError, match=r"weights\[0\] must be a finite number, got nan"):
        mixshard.Overlay([packs[0], big], weights=[float("nan"), 1])
    with pytest.raises(ValueError, match=r"weights are all 0 \(\[0, 0\]\)"):
        mixshard.Overlay([packs[0], big], weights=[0, 0])
    with pytest.raises(ValueError, match="set_weights: this Overlay was made without weights="):
        mixshard.Overlay(packs[0]).set_weights([1])


@pytest.mark.cuda
@pytest.mark.parametrize("cache", ["device", "pool", "stream"])
def test_cuda_states_resume_byte_for_byte(packs, cache):
    kw = dict(KW, cache=cache, device="cuda", pool=16, uses=2)

    def calls(o: mixshard.Overlay, count: int) -> list[torch.Tensor]:
        return [o(torch.full((8, 6, 8, 8), 90.0, device="cuda")) for _ in range(count)]

    for source, weights in ((packs[0], None), (list(packs), [0.7, 0.3])):
        ov = mixshard.Overlay(source, weights=weights, **kw)
        calls(ov, 13)
        state = ov.state_dict()
        assert len(pickle.dumps(state)) <= 4096
        want = calls(ov, 20)
        again = mixshard.Overlay(source, weights=weights, **kw)
        again.load_state_dict(state)
        assert all(torch.equal(a, b) for a, b in zip(calls(again, 20), want))
        ov.close()
        again.close()


@pytest.mark.parametrize("cache", ["pool", "stream"])
def test_a_mix_of_pools_or_streams_shows_each_packs_images_by_weight(packs, cache):
    a, b = images_of(packs[0]), images_of(packs[1])
    kw = dict(weights=[0.75, 0.25], cache=cache, flip=False, pool=24, num_workers=1, seed=5)
    one, two = mixshard.Overlay(list(packs), **kw), mixshard.Overlay(list(packs), **kw)
    drawn = torch.cat([one.sample(12) for _ in range(40)])
    assert torch.equal(drawn, torch.cat([two.sample(12) for _ in range(40)]))  # seeded
    from_b = [img.numpy().tobytes() in b for img in drawn]
    assert all(img.numpy().tobytes() in a or x for img, x in zip(drawn, from_b))
    assert abs(np.mean(from_b) - 0.25) < 4.5 * np.sqrt(0.25 * 0.75 / len(drawn))
    one.close()
    two.close()


def test_a_mix_of_pools_resumes_after_new_weights(packs):
    """The pools' shares of `pool=` are the constructor's weights', not those a state
    brings: a restored mix makes the same pools."""
    kw = dict(KW, cache="pool", pool=20, uses=2, weights=[0.8, 0.2])
    ov = mixshard.Overlay(list(packs), **kw)
    run(ov, 6)
    ov.set_weights([0.3, 0.7])
    run(ov, 6, 6)
    state = ov.state_dict()
    assert state["devices"]["cpu"]["carried"]["chunk"] == 5
    want = run(ov, 15, 12)
    again = mixshard.Overlay(list(packs), **kw)
    again.load_state_dict(state)
    assert again.weights == [0.3, 0.7]
    assert all(torch.equal(a, b) for a, b in zip(run(again, 15, 12), want))
    ov.close()
    again.close()


@pytest.mark.parametrize("cache", ["pool", "stream"])
def test_a_mix_of_pools_or_streams_lends_one_buffer_and_hands_over_copies(packs, cache):
    """Each pack's pieces go straight into their samples' places: a lent call's images are
    one buffer of the mix's, used again by the next lent call; an owned call's are the
    caller's, which later calls (lent or owned, drawing new chunks and batches) never touch."""
    kw = dict(weights=[0.5, 0.5], cache=cache, flip=False, pool=24, num_workers=1, seed=5)
    ov = mixshard.Overlay(list(packs), batch_size=8, **kw)
    mix = ov._state(torch.device("cpu")).cache
    owned = [mix.take(8, own=True) for _ in range(2)]
    kept = [t.clone() for t in owned]
    lent = [mix.take(8, own=False) for _ in range(2)]
    assert lent[0].data_ptr() == lent[1].data_ptr()
    assert owned[0].data_ptr() != owned[1].data_ptr()
    assert lent[0].data_ptr() not in {t.data_ptr() for t in owned}
    for n in (8, 13, 3, 8) * 5:
        mix.take(n, own=n != 8)
    assert all(torch.equal(a, b) for a, b in zip(owned, kept))
    ov.close()


@pytest.mark.parametrize("mixed", [True, False])
@pytest.mark.parametrize("cache", ["device", "pool", "stream"])
def test_flips_are_placed_as_the_torch_ops_place_them(packs, cache, mixed, monkeypatch):
    """With flips and nothing to crop, a mix places each pack's images flipped in one pass (a
    device cache gathers them so): the images drawn without flips, half of them mirrored, and
    the compiled pass's bytes are the torch ops' (what a GPU runs)."""
    kw = dict(cache=cache, pool=24, num_workers=1, seed=3)
    source = list(packs) if mixed else packs[0]
    if mixed:
        kw["weights"] = [0.6, 0.4]

    def draws(**extra) -> torch.Tensor:
        ov = mixshard.Overlay(source, **kw, **extra)
        out = torch.cat([ov.sample(9) for _ in range(12)])
        ov.close()
        return out

    flipped = draws()
    if mixed or cache != "device":  # (one pack's device cache draws its order and the flips
        plain = draws(flip=False)  # from one generator: without flips, another order)
        mirrored = [not torch.equal(f, p) for f, p in zip(flipped, plain)]
        assert all(
            torch.equal(f, p.flip(-1) if m else p) for f, p, m in zip(flipped, plain, mirrored)
        )
        assert 0.3 < np.mean(mirrored) < 0.7
    else:  # each a pack image or its mirror
        known = images_of(packs[0])
        assert all(
            img.numpy().tobytes() in known or img.flip(-1).numpy().tobytes() in known
            for img in flipped
        )
    monkeypatch.setattr(ops, "_lerp", None)
    assert torch.equal(draws(), flipped)
