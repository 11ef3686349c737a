"""`mixshard.augment.inputs.arrays`: numpy, JAX and Warp arrays through torch functions,
zero-copy, and back as the caller's kind. The JAX and Warp tests skip where those are not
installed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mixshard.augment.inputs.arrays import as_torch, kind_of, same_kind
from mixshard.augment.kernels.pasting import composite
from mixshard.augment.masks.builders import from_segmentation

# the public entry points, each wired with one decorator line
composite_any = composite
segmentation_any = from_segmentation


def scene(n=2, h=4, w=5):
    """A uint8 observation, a grey background and ids: id 0 (background) in the left column,
    7 elsewhere."""
    obs = np.arange(n * 3 * h * w, dtype=np.uint8).reshape(n, 3, h, w)
    img = np.full((n, 3, h, w), 200, np.uint8)
    seg = np.full((n, h, w), 7, np.int16)
    seg[:, :, 0] = 0
    return obs, img, seg


def expected(obs, img, seg):
    keep = (seg != 0)[:, None]
    return np.where(keep, obs, img)


def test_torch_and_other_values_pass_through_untouched():
    t = torch.zeros(2)
    assert as_torch(t)[0] is t and as_torch(None)[0] is None and as_torch(3)[0] == 3
    assert kind_of(t) == "torch" and kind_of(None) == "other" and kind_of([1]) == "other"


def test_numpy_in_numpy_out_sharing_memory():
    obs, img, seg = scene()
    t, back = as_torch(obs)
    assert isinstance(t, torch.Tensor) and t.data_ptr() == obs.ctypes.data
    assert back(t).ctypes.data == obs.ctypes.data
    keep = segmentation_any(seg, [7])
    assert isinstance(keep, np.ndarray) and keep.shape == (2, 4, 5)
    out = np.empty_like(obs)
    got = composite_any(obs, img, keep, out=out)
    assert isinstance(got, np.ndarray) and np.shares_memory(got, out)
    np.testing.assert_array_equal(got, expected(obs, img, seg))


def test_a_read_only_numpy_observation_is_read_without_a_warning(recwarn):
    obs, img, seg = scene()
    obs.setflags(write=False)
    got = composite_any(obs, img, torch.from_numpy(seg != 0).unsqueeze(1))
    np.testing.assert_array_equal(got, expected(obs, img, seg))
    assert not [w for w in recwarn if "not writable" in str(w.message)]
    with pytest.raises(ValueError, match="out is a read-only numpy array"):
        composite_any(torch.from_numpy(obs.copy()), img, None, out=obs)


def test_a_torch_call_takes_the_direct_path(monkeypatch):
    """All-torch arguments never bind the signature (the per-call cost stays a type check)."""
    import inspect

    obs, img, seg = (torch.from_numpy(a) for a in scene())

    def refuse(*args, **kwargs):
        raise AssertionError("bound the signature")

    monkeypatch.setattr(inspect.Signature, "bind", refuse)
    got = composite_any(obs, img, (seg != 0).unsqueeze(1), alpha=1.0)
    np.testing.assert_array_equal(got.numpy(), expected(obs.numpy(), img.numpy(), seg.numpy()))


def test_a_method_checks_its_objects_device():
    class Owner:
        device = torch.device("cuda", 0)

        @same_kind("obs")
        def run(self, obs):
            return obs

    jax = pytest.importorskip("jax")
    x = jax.numpy.zeros((1, 3, 2, 2), jax.numpy.uint8)
    with pytest.raises(ValueError, match=r"obs is a JAX array on .* computes on cuda:0"):
        Owner().run(x)


# -- JAX ---------------------------------------------------------------------------------------


def test_jax_arrays_go_through_zero_copy_and_come_back_as_jax():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    obs, img, seg = scene()
    x = jnp.asarray(obs)
    t, back = as_torch(x)
    assert t.data_ptr() == x.unsafe_buffer_pointer()  # a view of JAX's buffer, not a copy
    y = back(t)
    assert isinstance(y, jax.Array) and y.unsafe_buffer_pointer() == t.data_ptr()
    assert y.devices() == x.devices()
    keep = segmentation_any(jnp.asarray(seg), [7])
    assert isinstance(keep, jax.Array) and keep.dtype == jnp.bool_ and keep.shape == (2, 4, 5)
    got = composite_any(x, jnp.asarray(img), keep)
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(np.asarray(got), expected(obs, img, seg))


def test_jax_refusals_say_what_was_given():
    jax = pytest.importorskip("jax")
    x = jax.numpy.zeros((1, 3, 2, 2), jax.numpy.uint8)
    with pytest.raises(ValueError, match=r"obs is a JAX array on .* but mixshard computes on cuda"):
        as_torch(x, "obs", torch.device("cuda", 0))
    with pytest.raises(TypeError, match="out cannot be a JAX array: JAX arrays are immutable"):
        composite_any(torch.zeros(1, 3, 2, 2), torch.zeros(1, 3, 2, 2), None, out=x)

    @jax.jit
    def inside(a):
        return composite_any(a, a, None)

    with pytest.raises(TypeError, match="obs is a traced JAX value"):
        inside(x)


# -- Warp --------------------------------------------------------------------------------------


def test_warp_arrays_keep_their_vector_dtype():
    wp = pytest.importorskip("warp")
    obs, img, seg = scene()
    # MuJoCo Warp's layout: (N, H, W) of vec3 RGB, ids (N, H, W) of vec2i (id, type)
    rgb = wp.array(obs.transpose(0, 2, 3, 1).astype(np.float32).copy(), dtype=wp.vec3, device="cpu")
    t, back = as_torch(rgb)
    assert t.shape == (2, 4, 5, 3) and t.data_ptr() == rgb.ptr
    again = back(t)
    assert again.dtype == wp.vec3 and again.shape == (2, 4, 5) and again.ptr == rgb.ptr
    ids = np.stack([seg, np.full_like(seg, 5)], -1).astype(np.int32)
    wseg = wp.array(ids, dtype=wp.vec2i, device="cpu")
    tseg, _ = as_torch(wseg)
    keep = segmentation_any(tseg[..., 0], [7])
    np.testing.assert_array_equal(keep.numpy(), (seg != 0))
    mask = segmentation_any(wp.array(seg.astype(np.int32), device="cpu"), [7])
    assert isinstance(mask, wp.array) and mask.shape == (2, 4, 5)


def test_the_public_entry_points_take_numpy_and_give_numpy(tmp_path):
    """`composite`, the mask builders, the keys and `Backgrounds.composite` as they are
    exported: numpy in (a gymnasium vector env's observations), numpy out."""
    from helpers import clip_pack

    import mixshard

    obs, img, seg = scene()
    keep = mixshard.masks.from_segmentation(seg, background=0)
    assert isinstance(keep, np.ndarray) and keep.shape == (2, 4, 5)
    got = mixshard.composite(obs, img, keep)
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, expected(obs, img, seg))
    np.testing.assert_array_equal(
        mixshard.composite(obs, img, mixshard.keys.from_segmentation(seg, background=0)), got
    )
    bg = mixshard.Backgrounds(clip_pack(tmp_path, [2, 3], size=5), 2, frames=1)
    nhwc = np.zeros((2, 5, 5, 3), np.uint8)  # channels-last, as a simulator renders
    out = bg.composite(nhwc, np.zeros((2, 5, 5), bool), layout="NHWC")  # all background
    assert isinstance(out, np.ndarray) and out.shape == (2, 5, 5, 3)
    np.testing.assert_array_equal(out, bg.images(layout="NHWC").numpy())
