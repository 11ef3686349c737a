"""Arguments and resume states are checked at the call, with errors that name them (issue 22,
points 5 and 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import small_pack

import mixshard
from mixshard import Overlay, ShardStream


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> Path:
    """40 images of 8 px, blocks of 4."""
    return small_pack(tmp_path_factory.mktemp("args"), 20, shard_size=20, block_size=4)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"alpha": torch.tensor(1.5)},
            ValueError,
            "alpha must be in [0, 1], got a tensor from 1.5",
        ),
        ({"alpha": torch.tensor([0.2, -0.1])}, ValueError, "alpha must be in [0, 1]"),
        ({"alpha": torch.tensor(float("nan"))}, ValueError, "alpha must be in [0, 1]"),
        ({"alpha": (0.1, 0.2, 0.3)}, ValueError, "alpha must be a number or a (lo, hi) pair"),
        ({"alpha": "0.5"}, TypeError, "alpha must be a number"),
        ({"alpha": 1.5}, ValueError, "alpha must be in [0, 1], got 1.5"),
        ({"cache": "stream", "batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
        ({"cache": "stream", "batch_size": -1}, ValueError, "batch_size must be >= 1, got -1"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an integer, got 2.0"),
        ({"num_workers": -1}, ValueError, "num_workers must be >= 0, got -1"),
        ({"pool": 3.5}, TypeError, "pool must be an integer, got 3.5"),
        ({"uses": True}, TypeError, "uses must be an integer, got True"),
        ({"seed": -2}, ValueError, "seed must be >= 0, got -2"),
        ({"uses": 0}, ValueError, "uses must be >= 1, got 0"),
        ({"pool": 0}, ValueError, "pool must be >= 1 images, got 0"),
        ({"flip": "yes"}, TypeError, "flip must be True or False, got 'yes'"),
        ({"crop": "random"}, ValueError, "crop must be (lo, hi), 'auto' or None, got 'random'"),
        ({"crop": (0.5,)}, ValueError, "crop must be (lo, hi) with 0 < lo <= hi <= 1, got (0.5,)"),
        ({"crop": (0.0, 1.0)}, ValueError, "crop must be (lo, hi) with 0 < lo <= hi"),
        ({"crop": ("a", 1)}, ValueError, "crop must be (lo, hi) with 0 < lo <= hi"),
        ({"cache": "gpu"}, ValueError, "cache must be one of auto, device, pool, stream"),
        ({"cache_fraction": 0}, ValueError, "cache_fraction must be in (0, 1], got 0"),
        ({"cache_fraction": "0.5"}, ValueError, "cache_fraction must be in (0, 1], got '0.5'"),
    ],
)
def test_overlay_arguments_name_what_is_wrong(pack_dir, kwargs, error, message):
    with pytest.raises(error) as got:
        Overlay(pack_dir, **kwargs)
    assert str(got.value).startswith(message)


@pytest.mark.parametrize(
    ("alpha", "error", "message"),
    [
        ("0.5", TypeError, "alpha must be a number, a (lo, hi) pair or a tensor, got '0.5'"),
        ((0.1, 0.2, 0.3), ValueError, "alpha must be a number or a (lo, hi) pair of two"),
        ((0.6, 0.2), ValueError, "alpha range must satisfy 0 <= lo <= hi <= 1, got (0.6, 0.2)"),
        (1.5, ValueError, "alpha must be in [0, 1], got 1.5"),
        (torch.ones(2, 1), ValueError, "alpha must be a float tensor of 0 or 1 dimensions"),
    ],
)
def test_a_per_call_alpha_is_checked_as_the_constructor_checks_it(pack_dir, alpha, error, message):
    overlay = Overlay(pack_dir, cache="device")
    for make in (
        lambda: overlay(torch.zeros(2, 3, 8, 8), alpha=alpha),
        lambda: Overlay(pack_dir, alpha=alpha),
    ):
        with pytest.raises(error) as got:
            make()
        assert str(got.value).startswith(message)
    overlay.close()


def test_a_tensor_alpha_in_range_blends_as_the_float(pack_dir):
    obs = torch.zeros(2, 3, 8, 8)
    outs = []
    for alpha in (torch.tensor(1.0), 1.0):
        overlay = Overlay(pack_dir, alpha=alpha, cache="device", flip=False)
        outs.append(overlay(obs))
        overlay.close()
    assert torch.equal(outs[0], outs[1]) and outs[0].max() > 0


@pytest.mark.parametrize(
    ("n", "error", "message"),
    [(2.5, TypeError, "n must be an integer, got 2.5"), (-1, ValueError, "n must be >= 0")],
)
def test_sample_counts(pack_dir, n, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        Overlay(pack_dir, cache="device").sample(n)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda p: mixshard.loader(p, 4, num_workers=1.5), TypeError, "num_workers must be an"),
        (lambda p: mixshard.loader(p, 4, prefetch_factor=0), ValueError, "prefetch_factor must"),
        (lambda p: ShardStream(p, 0), ValueError, "batch_size must be >= 1, got 0"),
        (lambda p: ShardStream(p, 4.0), TypeError, "batch_size must be an integer"),
        (lambda p: ShardStream(p, 4, window=0), ValueError, "window must be >= 1"),
        (lambda p: ShardStream(p, 4, seed=0.5), TypeError, "seed must be an integer"),
        (lambda p: ShardStream(p, 4, world_size=0), ValueError, "world_size must be >= 1"),
        (lambda p: mixshard.prefetch([], "cpu", depth=0), ValueError, "depth must be >= 1"),
    ],
)
def test_reader_arguments_name_what_is_wrong(pack_dir, call, error, message):
    with pytest.raises(error, match=message):
        call(pack_dir)


def _state(pack_dir, **kw):
    stream = ShardStream(pack_dir, 4, **kw)
    stream.position = 3
    return stream.state_dict()


@pytest.mark.parametrize(
    ("saved", "loading", "field"),
    [
        ({"shuffle": True}, {"shuffle": False}, "shuffle"),
        ({"order": "block"}, {"order": "global"}, "order"),
        ({"order": "block", "window": 2}, {"order": "block", "window": 3}, "window"),
        ({"seed": 1}, {"seed": 2}, "seed"),
        ({"world_size": 2}, {"world_size": 1}, "world_size"),
    ],
)
def test_a_state_of_another_configuration_is_refused(pack_dir, saved, loading, field):
    state = _state(pack_dir, **saved)
    with pytest.raises(ValueError, match=f"state_dict was saved with {field}="):
        ShardStream(pack_dir, 4, **loading).load_state_dict(state)
    with pytest.raises(ValueError, match=f"state_dict was saved with {field}="):
        mixshard.loader(pack_dir, 4, **loading).load_state_dict(state)


def test_a_state_of_another_batch_size_or_pack_is_refused(pack_dir):
    state = _state(pack_dir)
    with pytest.raises(ValueError, match="state_dict was saved with batch_size=4"):
        ShardStream(pack_dir, 2).load_state_dict(state)
    with pytest.raises(ValueError, match="state_dict was saved with count=41"):
        ShardStream(pack_dir, 4).load_state_dict({**state, "count": 41})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"batch": 10**6}, r"state_dict batch must be an int in \[0, 10\), got 1000000"),
        ({"batch": -5}, r"state_dict batch must be an int in \[0, 10\), got -5"),
        ({"batch": 1.5}, r"state_dict batch must be an int"),
        ({"epoch": -1}, r"state_dict epoch must be an int >= 0, got -1"),
    ],
)
def test_counters_out_of_range_are_refused(pack_dir, change, message):
    stream = ShardStream(pack_dir, 4)
    with pytest.raises(ValueError, match=message):
        stream.load_state_dict({**_state(pack_dir), **change})
    assert stream.position == 0


def test_missing_keys_and_non_dicts_are_refused(pack_dir):
    state = _state(pack_dir)
    del state["batch"], state["shuffle"]
    with pytest.raises(ValueError, match="state_dict is missing batch, shuffle"):
        ShardStream(pack_dir, 4).load_state_dict(state)
    with pytest.raises(TypeError, match="state_dict must be a dict, got list"):
        ShardStream(pack_dir, 4).load_state_dict([])


def test_a_good_state_resumes_exactly(pack_dir):
    run = list(ShardStream(pack_dir, 4, seed=5))
    resumed = ShardStream(pack_dir, 4, seed=5)
    resumed.load_state_dict(_state(pack_dir, seed=5))
    assert [b.tolist() for b in resumed] == [b.tolist() for b in run[3:]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(labels="names"), "unknown labels mode 'names'; use one of "),
        (dict(size=0), "size must be in [1, 4096], got 0"),
        (dict(size=4097), "size must be in [1, 4096], got 4097"),
        (dict(block_size=0), "block_size must be in [1, 65536], got 0"),
        (dict(block_size=1 << 17), "block_size must be in [1, 65536], got 131072"),
        (
            dict(seed=-1),
            "variants and shard_size must be >= 1 and seed >= 0, got variants=1, "
            "shard_size=1000, seed=-1",
        ),
        (
            dict(shard_size=0),
            "variants and shard_size must be >= 1 and seed >= 0, got variants=1, "
            "shard_size=0, seed=0",
        ),
        (dict(crop="random", variants=6, shard_size=5), "variants=6 exceeds shard_size=5"),
        (dict(finish=True, resume=True), "finish only writes index.json: no resume, overwrite, "),
        (dict(part=(2, 2)), "part must be (k, n) with 0 <= k < n, got (2, 2)"),
        (dict(part=(0, 0)), "part must be (k, n) with 0 <= k < n, got (0, 0)"),
        (dict(part=(0, 2), overwrite=True), "part cannot be combined with overwrite or ray"),
    ],
)
def test_pack_options_are_checked_before_anything_is_read_or_written(tmp_path, kwargs, message):
    kwargs.setdefault("shard_size", 1000)
    with pytest.raises(ValueError) as err:
        mixshard.pack(tmp_path / "no-source", tmp_path / "out", **kwargs)
    assert str(err.value).startswith(message)
    assert not (tmp_path / "out").exists()


def test_the_pack_command_offers_the_choices_of_the_option_types():
    """`core/choices.py` lists each option's values once; the command's choices are those."""
    import click

    from mixshard.cli import cli
    from mixshard.core.choices import ClipList, Crop, Labels, Resample, values

    params = {p.name: p for p in cli.commands["pack"].params}
    for name, choice in (("crop", Crop), ("labels", Labels), ("resample", Resample),
                         ("clip_list", ClipList)):  # fmt: skip
        assert isinstance(params[name].type, click.Choice), name
        assert tuple(params[name].type.choices) == values(choice), name
