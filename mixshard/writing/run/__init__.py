"""How a plan runs: decode processes and their shared result slots, chunks or whole shards on
this machine, one Ray task per shard, and a Ctrl-C Python drops raised again."""
