"""Which files can be images, by their first bytes: the signatures of the formats whose
extensions `pack` reads (JPEG, PNG, GIF, BMP, WebP, TIFF, the PPM family), as PIL's own
plugins recognise them. A file that starts with none of them is skipped from its first 16
bytes, before the rest is read (or, from a .tar.gz, copied aside): a 300 MB file of zeros
named `.png` costs 16 bytes. The reason is the one PIL gives for such a file, in a folder
and in any archive alike, so a pack stays byte-identical to the pack of the extracted folder.
No PIL here: the archive lister and the pack process start without it."""

from __future__ import annotations

HEAD = 16  # bytes that decide (PIL reads as many to pick a format)
NOT_AN_IMAGE = "not an image PIL can read (cannot identify image file)"
SNIFF_FIRST = 1 << 20  # archive members larger than this are read whole only if images

_SIGNATURES = (
    b"\xff\xd8\xff",  # JPEG
    b"\x89PNG\r\n\x1a\n",
    b"GIF87a",
    b"GIF89a",
    b"BM",  # BMP
    b"MM\x00*",  # TIFF, and BigTIFF (+), in both byte orders
    b"II*\x00",
    b"MM*\x00",
    b"II\x00*",
    b"MM\x00+",
    b"II+\x00",
)


def looks_like_image(head: bytes) -> bool:
    """Whether a file starting with `head` (its first `HEAD` bytes, or all of a shorter file)
    may be an image of a format `pack` reads; False: PIL would not identify it either."""
    if head.startswith(_SIGNATURES):
        return True
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return True
    return len(head) >= 2 and head[:1] == b"P" and head[1] in b"0123456fy"  # PBM/PGM/PPM/PFM
