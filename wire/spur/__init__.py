"""spur's `slurm` gRPC package: the subset job reclaim speaks (slurm.proto)."""
