"""A host's VMs behind one hypervisor-neutral protocol (console/vms/backend.py); libvirt implements it
(console/vms/libvirt_domains.py, the demo's node file in console/demo/node_domains.py)."""
