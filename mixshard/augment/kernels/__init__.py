"""The passes over pixels: `blend`, `composite`, flips, crops and resizes on any device, and a
CPU's one compiled pass (`fused`, over `_lerp.c`)."""
