"""Shard URLs (HTTP(S), `pipe:`) streamed whole through a shuffle buffer, and bounded URL reads."""
