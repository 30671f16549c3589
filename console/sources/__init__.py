"""Host sources, each behind its seam: sysfs/procfs (a root dir), NVML (pynvml's library object),
libvirt (a URI) and psutil."""
