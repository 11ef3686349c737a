"""Bytes at offsets: a local pack's shard files opened, read, mapped and warmed; no policy."""
