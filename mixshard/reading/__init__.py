"""The reading side: pack folders and shard URLs -> ordered uint8 batches (plus `verify` and
`preview`, which need no torch)."""
