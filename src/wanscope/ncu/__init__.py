"""Nsight Compute: read reports (CSV and .ncu-rep), compute occupancy, diagnose kernels.

Never imports torch: everything here works on a laptop without a GPU.
"""
