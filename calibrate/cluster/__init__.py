"""calibrate.cluster: a real Slurm cluster on one Linux machine, one node per network namespace."""
