"""Orders, worker roles, the run feed, recycled buffers and the read plan: which images make
batch k, and how they are read."""
