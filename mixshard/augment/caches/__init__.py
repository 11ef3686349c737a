"""Where the backgrounds come from: the `CachePlan` that picks device, pool or stream and sizes
the pool, the caches themselves (the whole pack on the device, a pool refilled from the block
stream, a stream, one per pack of a mix, a pool of clips) and the packs of a mix."""
