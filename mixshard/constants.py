"""Every constant of the shard format and the defaults of the tools, in one place."""

from __future__ import annotations

FORMAT_NAME = "mixshard"
FORMAT_VERSION = 1

MANIFEST_NAME = "index.json"
SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".tar"
TMP_SUFFIX = ".partial"
# Written while a pack runs and removed when index.json is in place; lets `--resume` continue.
JOURNAL_NAME = ".mixshard-pack.jsonl"

# Tar member suffixes of one block (`KEY.<suffix>`); KEY is the global block index, `%08d`.
IMAGES_SUFFIX = "images.npy"
LABELS_SUFFIX = "labels.npy"
KEYS_SUFFIX = "keys.json"
BLOCK_KEY_FORMAT = "{:08d}"

TAR_BLOCK = 512

DEFAULT_SIZE = 84
DEFAULT_BLOCK_SIZE = 256
DEFAULT_SHARD_SIZE = 10_000
DEFAULT_SEED = 0
CHANNELS = 3
DTYPE = "uint8"
LAYOUT = "NCHW"
RESAMPLE = "bilinear"

CROP_MODES = ("center", "random", "full")
LABEL_MODES = ("auto", "folders", "none")
NO_LABEL = -1

# torchvision RandomResizedCrop defaults.
RANDOM_CROP_SCALE = (0.08, 1.0)
RANDOM_CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)

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


def shard_name(index: int) -> str:
    """File name of shard `index` inside a pack folder."""
    return f"{SHARD_PREFIX}{index:06d}{SHARD_SUFFIX}"
