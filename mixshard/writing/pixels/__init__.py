"""One file -> uint8 pixels: an image decoded, cropped and resized (the resize filters, compiled
in `_resize.c`), a video's frames probed and decoded in play order."""
