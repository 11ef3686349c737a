"""What augment's API is given: every argument check (`checks`), observation layouts
(`layouts`), and other libraries' arrays viewed as torch tensors (`arrays`). Imports no other
room of augment."""
