"""What a pack will hold, fixed before any pixel is decoded: the pack's options, the shard plan
and the decode tasks it hands the workers, a clip pack's sources and clip table."""
