"""Random draws that are pure functions of their key (`keyed`), the weights of a mix of packs
(`mixing`), and how `Backgrounds` plays clips (`playback`)."""
