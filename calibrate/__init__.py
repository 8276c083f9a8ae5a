"""Calibration: jobs that measure real clusters (torchrun, gloo on CPU, NCCL on GPU), parsers for
standard tools' output, and fitting of a profile the simulator reads as plain JSON.

torch is imported only inside the jobs, never by the simulator.
"""
