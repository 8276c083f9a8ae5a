"""calibrate.gpu_suite: one prepared run on one GPU that measures what the compute model needs."""
