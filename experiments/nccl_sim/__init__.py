"""experiments.nccl_sim."""
