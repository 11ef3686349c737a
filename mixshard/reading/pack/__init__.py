"""Bytes at offsets: a pack's shard files (a folder's, or a store cache's) opened, read,
mapped and warmed; no policy."""
