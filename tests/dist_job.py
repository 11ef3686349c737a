"""One rank of a two-process torch.distributed (gloo, CPU) run; test_stream starts two.

python dist_job.py RANK WORLD PORT PACK OUT_JSON
"""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

import mixshard


def main() -> None:
    rank, world, port, pack, out = sys.argv[1:]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=int(rank), world_size=int(world)
    )
    stream = mixshard.ShardStream(pack, 8)  # rank and world size come from torch.distributed
    images, batches = [], 0
    for batch in stream:
        batches += 1
        images += [img.numpy().tobytes().hex() for img in batch]
    dist.barrier()
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump({"batches": batches, "images": images}, f)


if __name__ == "__main__":
    main()
