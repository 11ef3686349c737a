"""The reading side: pack folders and packs on stores -> ordered uint8 batches (plus `verify` and
`preview`, which need no torch)."""
