"""calibrate.nccl_tests."""
