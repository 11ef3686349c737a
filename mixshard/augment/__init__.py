"""Backgrounds on the device, composited into observations: `Overlay` and `Backgrounds` at the
top, over rooms that each import only the rooms below them (`inputs` < `masks` < `kernels` <
`draws` < `caches` < `state`): what the API is given and its checks; masks and keys; the
blend and composite passes; the keyed draws and the mix; the caches that feed the
backgrounds and the plan that picks one; the state of each front object."""
