"""Keep masks for `composite` (`builders`, public as `mixshard.masks`) and keys that make them
inside the composite's pass (`keys`, public as `mixshard.keys`), with the rules they share."""
