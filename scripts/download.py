"""Download one dataset archive for the Makefile's dataset targets, resuming a cut transfer.

The file is written to DEST.part and renamed to DEST once complete. A transfer that drops
(a reset connection, a read that ends before the announced length, a timeout) is resumed from
the bytes already on disk with an HTTP `Range` request, up to `--retries` times; a rerun of
the command resumes the same way. With `--md5` the finished file is checked: a wrong checksum
moves it aside to DEST.bad (kept for a look) and exits 1 with one line that says so. A DEST
that is already there is only checked.

    python scripts/download.py URL DEST [--md5 HEX] [--retries 5] [-q]
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CHUNK = 1 << 20
TIMEOUT = 60.0  # seconds without a byte before a transfer counts as dropped


class DownloadError(Exception):
    """The download cannot be finished; the message is the one line printed."""


def _total(response: http.client.HTTPResponse, have: int) -> int | None:
    """The full size of the file, from a 206's Content-Range or a 200's Content-Length."""
    if response.status == 206:
        span = response.headers.get("Content-Range", "")
        total = span.rsplit("/", 1)[-1]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _transfer(url: str, part: Path, bar) -> bool:
    """One request from what `part` already holds; True once the file is complete."""
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - http(s) only
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left past what we have: the file is complete
            return True
        raise DownloadError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
    with response:
        if response.status != 206:
            have = 0  # the server ignored the Range: start again
        total = _total(response, have)
        bar.reset(total=total)
        bar.update(have)
        with open(part, "ab" if have else "wb") as f:
            while data := response.read(CHUNK):
                f.write(data)
                bar.update(len(data))
        size = part.stat().st_size
    if total is not None and size < total:
        raise http.client.IncompleteRead(b"", total - size)
    return True


def md5sum(path: Path) -> str:
    digest = hashlib.md5()  # noqa: S324 - the datasets publish MD5s
    with open(path, "rb") as f:
        while data := f.read(CHUNK):
            digest.update(data)
    return digest.hexdigest()


def download(url: str, dest: Path, md5: str | None = None, retries: int = 5, quiet: bool = False):
    """Fetch `url` into `dest` (resuming a cut transfer) and check its MD5 when given.

    Raises:
        DownloadError: the server refuses, the transfer keeps failing, or the checksum is wrong
            (the file is then moved to DEST.bad).
    """
    from tqdm import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    if not dest.exists():
        with tqdm(unit="B", unit_scale=True, desc=dest.name, disable=quiet or None) as bar:
            for attempt in range(retries + 1):
                try:
                    _transfer(url, part, bar)
                    break
                except (OSError, http.client.HTTPException) as exc:
                    if isinstance(exc, urllib.error.URLError) and attempt == 0:
                        reason = getattr(exc, "reason", exc)
                        raise DownloadError(f"cannot download {url}: {reason}") from None
                    if attempt == retries:
                        raise DownloadError(
                            f"cannot download {url}: the transfer failed {retries + 1} times "
                            f"({type(exc).__name__}); run the same command again to resume "
                            f"from the {part.stat().st_size if part.exists() else 0} bytes "
                            f"kept in {part}"
                        ) from None
                    time.sleep(min(2.0**attempt, 30.0) / 10)
        os.replace(part, dest)
    if md5:
        actual = md5sum(dest)
        if actual != md5.lower():
            bad = dest.with_name(dest.name + ".bad")
            os.replace(dest, bad)
            raise DownloadError(
                f"{url}: MD5 of the download is {actual}, expected {md5.lower()}; nothing was "
                f"packed; the file is kept at {bad} (remove it to download again)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--md5", default="", help="expected MD5 (empty: no check)")
    parser.add_argument("--retries", type=int, default=5, help="resumes of a dropped transfer")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    try:
        download(args.url, args.dest, args.md5 or None, args.retries, args.quiet)
    except DownloadError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print(f"Interrupted; run the same command again to resume ({args.dest}.part)")
        sys.exit(130)


if __name__ == "__main__":
    main()
