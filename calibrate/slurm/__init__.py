"""calibrate.slurm: sbatch templates for the calibration jobs, and the check they run before launching."""
