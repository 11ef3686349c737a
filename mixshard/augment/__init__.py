"""The overlay itself: the fused blend and batched crops/flips (`ops`), and `Overlay` with its
background caches."""
