"""The writing side: source folder -> decoded, resized images -> shards and `index.json`.
Never imports torch or the reading side.

Its rooms, each importing only the rooms before it (and `core`): `sources` (what SRC holds),
`pixels` (a file's pixels), `plan` (what the pack will hold), `out` (where it is written), `run`
(how the plan runs). `packing` (`pack`) and `results` sit above them all."""
