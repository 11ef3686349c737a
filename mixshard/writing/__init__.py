"""The writing side: source folder -> decoded, resized images -> shards and `index.json`.
Never imports torch or the reading side."""
