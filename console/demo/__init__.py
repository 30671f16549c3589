"""The simulated host: generator of synthetic hosts, simulated NVML library and kernel, demo state."""
