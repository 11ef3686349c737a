"""Every constant of the shard format and the defaults of the tools, in one place."""

from __future__ import annotations

from .choices import Crop, Labels, Resample, values

FORMAT_NAME = "mixshard"
FORMAT_VERSION = 1
# A clip pack (frames of video clips in play order, `clips` in index.json) is version 2, so a
# mixshard that reads only version 1 refuses it instead of serving its frames as shuffled images.
CLIP_FORMAT_VERSION = 2
READ_VERSIONS = (FORMAT_VERSION, CLIP_FORMAT_VERSION)

MANIFEST_NAME = "index.json"
SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".tar"
TMP_SUFFIX = ".partial"
# Written while a pack runs and removed when index.json is in place; lets `--resume` continue.
# Job-array parts keep one each: `.mixshard-pack.part-K-of-N.jsonl`.
JOURNAL_NAME = ".mixshard-pack.jsonl"
JOURNAL_GLOB = ".mixshard-pack*.jsonl"
# Locked (flock) by the pack writing into a folder, and naming it; removed when it is done.
LOCK_NAME = ".mixshard-lock"

# Tar member suffixes of one block (`KEY.<suffix>`); KEY is the global block index, `%08d`.
IMAGES_SUFFIX = "images.npy"
LABELS_SUFFIX = "labels.npy"
KEYS_SUFFIX = "keys.json"
BLOCK_KEY_FORMAT = "{:08d}"

TAR_BLOCK = 512

# Bounds a manifest must respect: a damaged or hostile index.json cannot make a reader allocate
# more than these.
MAX_MANIFEST_BYTES = 256 << 20
MAX_SIZE = 4096
MAX_BLOCK_SIZE = 1 << 16
MAX_BLOCK_BYTES = 1 << 30

DEFAULT_SIZE = 84
DEFAULT_BLOCK_SIZE = 256
DEFAULT_SHARD_SIZE = 10_000
DEFAULT_SEED = 0
CHANNELS = 3
DTYPE = "uint8"
LAYOUT = "NCHW"
# the values of the options with choices, as `core/choices.py` lists them
RESAMPLE_MODES = values(Resample)  # how a pack resizes (`Resample`)
RESAMPLE: Resample = "bilinear"  # the default
CROP_MODES = values(Crop)
LABEL_MODES = values(Labels)
NO_LABEL = -1

# Lower-case; matching is case-insensitive.
IMAGE_EXTENSIONS = (
    ".jpg",
    ".jpeg",
    ".png",
    ".bmp",
    ".gif",
    ".webp",
    ".tif",
    ".tiff",
    ".ppm",
    ".pgm",
)
# A clip pack's video files (lower-case; matched case-insensitively); decoded with PyAV.
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi", ".mov")


def shard_name(index: int) -> str:
    """File name of shard `index` inside a pack folder."""
    return f"{SHARD_PREFIX}{index:06d}{SHARD_SUFFIX}"
