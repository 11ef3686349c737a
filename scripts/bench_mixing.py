"""Several packs by weight (issue 50): the picks' shares and autocorrelation, resumes byte for
byte, and the size of a saved state.

Three tables:
  * shares: for 2-5 packs with weights down to 1%, 10^6 draws (--quick 10^5) of the pick as
    `Overlay` makes it (sample numbers 0..n-1) and as `Backgrounds` makes it (one environment's
    episodes 0..n-1): the largest |realised share - weight| in points of share (goal < 0.5) and
    in standard deviations of independent draws, and the autocorrelation of each pack's
    indicator at every lag 1..10^4 (--quick 10^3): its largest |r| in units of 1/sqrt(n) (the
    noise of independent draws; goal < 5.5, which chance passes 99.8% of the time over 5 x
    10^4 lags) and the lags past 4/sqrt(n) against the number expected by chance;
  * resume: a state saved mid-run (weights changed every 100 steps) and loaded into a fresh
    object, then the next 10^5 composited observations (`Backgrounds`, 100 environments x
    1,000 steps; --quick 10^3) and 10^4 overlaid batches (`Overlay`, device, pool and stream
    caches, one pack and a mix; --quick 10^2) against the uninterrupted run's, as a SHA-256 of every
    output's bytes (goal: equal);
  * state size: `len(pickle.dumps(state_dict()))` against 4 KB + 16 bytes per environment.

    python scripts/bench_mixing.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import pickle
import tempfile
from pathlib import Path

import numpy as np
import torch
from benchlib import machine, table

import mixshard
from mixshard.augment.caches.mixcache import _PACK as OVERLAY_STREAM
from mixshard.augment.draws.keyed import keyed, keyed_np, seed_key
from mixshard.augment.draws.mixing import Mix
from mixshard.augment.draws.playback import _PACK as EPISODE_STREAM

WEIGHTS = [
    [0.5, 0.5],
    [0.99, 0.01],
    [0.6, 0.3, 0.1],
    [0.97, 0.01, 0.01, 0.01],
    [0.4, 0.3, 0.2, 0.09, 0.01],
    [0.2, 0.2, 0.2, 0.2, 0.2],
]


def autocorrelation(seq: np.ndarray, lags: int) -> np.ndarray:
    """Autocorrelation of `seq` at lags 1..lags (through the FFT)."""
    x = seq - seq.mean()
    size = 1 << int(np.ceil(np.log2(2 * len(x))))
    f = np.fft.rfft(x, size)
    acf = np.fft.irfft(f * np.conj(f), size)[: lags + 1]
    return acf[1:] / acf[0]


def picks(weights: list[float], n: int, who: str) -> np.ndarray:
    """The packs of n draws as `Overlay` (samples) or `Backgrounds` (episodes) picks them."""
    mix, key = Mix(len(weights), weights), seed_key(0)
    if who == "Overlay":
        return mix.pick_np(keyed_np(key, np.arange(n, dtype=np.int64), 0, OVERLAY_STREAM))
    episodes = torch.arange(n)
    return mix.pick(keyed(key, torch.zeros_like(episodes), episodes, EPISODE_STREAM)).numpy()


def share_rows(n: int, lags: int) -> list[list[object]]:
    rows: list[list[object]] = []
    for weights in WEIGHTS:
        w = np.array(weights)
        for who in ("Overlay", "Backgrounds"):
            packs = picks(weights, n, who)
            dev = np.bincount(packs, minlength=len(w)) / n - w
            z = np.abs(dev) / np.sqrt(w * (1 - w) / n)
            acf = np.stack([autocorrelation((packs == k) * 1.0, lags) for k in range(len(w))])
            top = np.abs(acf).max() * np.sqrt(n)
            past = int((np.abs(acf) * np.sqrt(n) > 4).sum())
            expected = acf.size * 6.3e-5  # P(|N(0,1)| > 4)
            ok = np.abs(dev).max() < 0.005 and top < 5.5
            rows.append(
                [
                    "/".join(f"{x:g}" for x in weights),
                    who,
                    f"{n:,}",
                    f"{np.abs(dev).max() * 100:.3f}",
                    f"{z.max():.2f}",
                    f"{top:.2f}",
                    f"{past} (chance: {expected:.1f})",
                    "met" if ok else "NOT met",
                ]
            )
    return rows


def make_packs(root: Path) -> tuple[Path, Path, Path]:
    """A clip pack (12 clips of 6-30 frames), an image pack (200 images) and a second image
    pack (120), all 32 px."""
    from PIL import Image

    from mixshard.core.manifest import Manifest
    from mixshard.testdata import make_image_folder

    src, rng = root / "frames", np.random.default_rng(0)
    src.mkdir()
    lengths = rng.integers(6, 31, 12).tolist()
    for c, count in enumerate(lengths):
        base = rng.integers(0, 256, (32, 32, 3))
        for f in range(count):
            frame = ((base + 7 * f) % 256).astype(np.uint8)
            Image.fromarray(frame).save(src / f"c{c:03d}_f{f:04d}.png")
    clips = root / "clips"
    mixshard.pack(src, clips, size=32, shuffle=False, labels="none", workers=1)
    data = json.loads((clips / "index.json").read_text())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    data.update(version=2, classes=[f"c{c}" for c in range(len(lengths))])
    data["clips"] = [
        {"name": f"c{c}", "start": int(s), "count": int(k), "fps": 25.0}
        for c, (s, k) in enumerate(zip(starts, lengths))
    ]
    Manifest.from_dict(data, str(clips)).save(clips)
    out = []
    for name, count, seed in (("images", 200, 1), ("more", 120, 2)):
        make_image_folder(root / f"{name}-src", classes=4, per_class=count // 4, seed=seed)
        mixshard.pack(root / f"{name}-src", root / name, size=32, workers=1)
        out.append(root / name)
    return clips, out[0], out[1]


def backgrounds_run(bg: mixshard.Backgrounds, start: int, steps: int, obs: torch.Tensor) -> str:
    """Steps start..start+steps: resets by a fixed pattern, new weights every 100 steps; the
    SHA-256 of every composite's bytes."""
    digest = hashlib.sha256()
    envs = torch.arange(bg.num_envs)
    for t in range(start, start + steps):
        if t % 100 == 0:
            bg.set_weights([1 + (t // 100) % 3, 1, 0.5])
        bg.step()
        bg.reset((envs * 7 + t) % (20 + envs % 13) == 0)
        digest.update(bg.composite(obs, alpha=0.6).numpy().tobytes())
    return digest.hexdigest()


def overlay_run(ov: mixshard.Overlay, start: int, calls: int, obs: torch.Tensor) -> str:
    """Calls start..start+calls of 24-32 observations (a pool: 32, as a training loop calls
    it: its state is its calls' sizes); the SHA-256 of every result."""
    digest = hashlib.sha256()
    vary = 1 if ov.cache == "pool" else 9
    for t in range(start, start + calls):
        if ov.weights is not None and t % 100 == 0:
            ov.set_weights([1 + (t // 100) % 3, 1])
        digest.update(ov(obs[: 32 - t % vary]).numpy().tobytes())
    return digest.hexdigest()


def resume_rows(packs: tuple[Path, Path, Path], scale: int) -> list[list[object]]:
    clips, images, more = packs
    rows: list[list[object]] = []
    obs = torch.rand(100, 9, 32, 32, generator=torch.Generator().manual_seed(0)) * 255
    at, steps = 357, 1000 // scale
    for cache in ("device", "pool"):
        kw = dict(weights=[1, 1, 0.5], playback="pingpong", flip=True, cache=cache, frames=3)
        first = mixshard.Backgrounds([clips, images, more], 100, **kw)
        backgrounds_run(first, 0, at, obs)
        state = first.state_dict()
        want = backgrounds_run(first, at, steps, obs)
        again = mixshard.Backgrounds([clips, images, more], 100, **kw)
        again.load_state_dict(state)
        got = backgrounds_run(again, at, steps, obs)
        first.close()
        again.close()
        what = f"Backgrounds, 3 packs, cache={cache!r}: {100 * steps:,} composited obs"
        rows.append([what, f"step {at}", "equal" if got == want else "DIFFERENT"])
    obs = torch.rand(32, 9, 32, 32, generator=torch.Generator().manual_seed(1)) * 255
    calls = 10_000 // scale
    for cache in ("device", "stream", "pool"):
        for source, weights in ((images, None), ([images, more], [1, 1])):
            kw = dict(cache=cache, weights=weights, alpha=(0.3, 0.7), crop=(0.5, 1.0), seed=3)
            if cache == "pool":  # refilled every few calls: the state is mid-pool
                kw.update(pool=64, uses=2)
            rows.append(overlay_resume(source, kw, 1234 // (scale // 10 or 1), calls, obs))
    return rows


def overlay_resume(source, kw: dict, at: int, calls: int, obs: torch.Tensor) -> list[object]:
    what = f"Overlay, {'a mix of 2' if kw['weights'] else 'one pack'}, cache={kw['cache']!r}"
    what += f": {calls:,} batches"
    first = mixshard.Overlay(source, num_workers=2, batch_size=64, **kw)
    overlay_run(first, 0, at, obs)
    try:
        state = first.state_dict()
    except ValueError as exc:
        first.close()
        return [what, f"call {at}", f"refused: {str(exc)[:44]}..."]
    want = overlay_run(first, at, calls, obs)
    again = mixshard.Overlay(source, num_workers=2, batch_size=64, **kw)
    again.load_state_dict(state)
    got = overlay_run(again, at, calls, obs)
    first.close()
    again.close()
    return [what, f"call {at}", "equal" if got == want else "DIFFERENT"]


def size_rows(packs: tuple[Path, Path, Path]) -> list[list[object]]:
    clips, images, more = packs
    rows: list[list[object]] = []
    for n in (1, 1024, 4096):
        bg = mixshard.Backgrounds([clips, images, more], n, weights=[1, 1, 1])
        size = len(pickle.dumps(bg.state_dict()))
        limit = 4096 + 16 * n
        rows.append([f"Backgrounds, 3 packs, {n} envs", f"{size:,}", f"{limit:,}", ok(size, limit)])
        bg.close()
    obs = torch.rand(32, 9, 32, 32) * 255
    for cache in ("device", "stream", "pool"):
        for source, weights in ((images, None), ([images, more], [1, 1])):
            ov = mixshard.Overlay(source, cache=cache, weights=weights, num_workers=1, crop=None)
            overlay_run(ov, 0, 20, obs)
            size = len(pickle.dumps(ov.state_dict()))
            what = f"Overlay, {'a mix of 2' if weights else 'one pack'}, cache={cache!r}, CPU"
            rows.append([what, f"{size:,}", "4,096", ok(size, 4096)])
            ov.close()
    return rows


def ok(size: int, limit: int) -> str:
    return "met" if size <= limit else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10x fewer draws, 100x fewer calls")
    args = parser.parse_args()
    n, lags, scale = (10**5, 10**3, 100) if args.quick else (10**6, 10**4, 1)
    print("Command: python scripts/bench_mixing.py" + (" --quick" if args.quick else ""))
    print(f"Machine: {machine()}; torch {torch.__version__}; {datetime.date.today()}")
    print()
    head = ["weights", "picks of", "draws", "max |share - w| (points)", "max z"]
    head += [f"max |r|, lags 1-{lags:,} (x sqrt n)", "lags past 4/sqrt n", "goal"]
    print(table(head, share_rows(n, lags)))
    with tempfile.TemporaryDirectory() as tmp:
        packs = make_packs(Path(tmp))
        print()
        print(table(["resume", "saved at", "next outputs"], resume_rows(packs, scale)))
        print()
        print(table(["state of", "bytes", "at most", "goal"], size_rows(packs)))


if __name__ == "__main__":
    main()
