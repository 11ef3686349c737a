"""Where a pack is written: OUT's lock, journals and free space, shards as fixed-header tars,
the source record, a finished pack replaced, and shards uploaded into an object store."""
