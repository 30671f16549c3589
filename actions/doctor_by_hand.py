"""The doctor's checks no plan can fix (actions/doctor_fixes.py refuses them): why, and what to do by hand."""
from __future__ import annotations

# What to do by hand, for the checks no plan can fix: (why no plan, what to do)
BY_HAND: dict[str, tuple[str, str]] = {
    "kvm": ("virtualization is switched on in the firmware",
            "turn on VT-x (Intel) or SVM (AMD) in the BIOS/UEFI setup, then load kvm_intel or kvm_amd "
            "(modprobe kvm_intel)"),
    "interrupt-remapping": ("interrupt remapping comes from the firmware and the IOMMU",
                            "turn on VT-d (Intel) or AMD-Vi with interrupt remapping in the BIOS/UEFI setup, "
                            "take intremap=off / nointremap off the kernel command line, and never set "
                            "vfio_iommu_type1 allow_unsafe_interrupts=1"),
    "acs": ("ACS is a property of the PCIe switch ports and the firmware",
            "turn ACS on in the BIOS/UEFI setup where it offers it, or put GPUs that must be isolated behind "
            "ports that have ACS (pcie_acs_override only makes the groups lie)"),
    "pcie-link": ("a link below its maximum is hardware",
                  "reseat the GPU, check that the slot is x16 electrically, check risers and cables and the "
                  "firmware's PCIe speed setting"),
    "vm-memory": ("how much memory a VM gets is a decision for the admin",
                  "resize the VM to at least twice its GPUs' memory (virsh setmaxmem VM SIZE --config; "
                  "virsh setmem VM SIZE --config), then restart it"),
    "vcpu-commit": ("how many vCPUs the VMs get is a decision for the admin",
                    "shrink VMs (virsh setvcpus VM N --config --maximum) or move some to another host"),
    "mig-pending": ("a pending MIG mode takes effect only after a GPU reset",
                    "stop what uses the GPU, then reset it (nvidia-smi --gpu-reset -i GPU) or reboot; "
                    "`nodeconsole mig GPU LAYOUT --apply` resets it as part of its plan"),
    "vgpu-host": ("the vGPU manager is NVIDIA's host driver package",
                  "install NVIDIA's vGPU host driver (the vGPU manager) and turn on the GPUs' SR-IOV VFs "
                  "(/usr/lib/nvidia/sriov-manage -e ALL)"),
    "libvirtd": ("starting the hypervisor's daemon is the admin's (and on Proxmox, its cluster's)",
                 "systemctl enable --now libvirtd (or virtqemud.socket where the host uses libvirt's modular "
                 "daemons; on Proxmox VE: systemctl enable --now pve-cluster)"),
    "cgroups": ("cgroup controllers come with the kernel and how systemd mounts them",
                "use a kernel with the controllers built in and let systemd mount them (cgroup v2: "
                "systemd.unified_cgroup_hierarchy=1), then reboot"),
    "secure-guest": ("secure guests are a firmware and kernel-parameter decision",
                     "turn SEV (AMD) or TDX (Intel) on in the firmware setup, then kvm_amd.sev=1 or "
                     "kvm_intel.tdx=1 on the kernel command line, and reboot"),
}
