"""The owner text of a GPU says how each VM holds it: given whole on vfio-pci, on its MIG slices or
vGPUs, or only named in a config while the host has the GPU — never `mig→train-c` for a VM that holds
the whole GPU of a host in MIG mode. Narrow columns shorten it without losing what it means."""
from __future__ import annotations

from nodeconsole.console.model import Gpu, GpuOwner, Mig, MigInstance, Vgpu, VgpuInstance
from nodeconsole.screens.widgets.gpu_text import owner_text


def _gpu(kind: str, vms: tuple[str, ...] = (), mig: Mig | None = None, vgpu: Vgpu | None = None) -> Gpu:
    return Gpu(address="0000:9a:00.0", name="NVIDIA H100 80GB HBM3", uuid=None, driver="nvidia", numa_node=1,
               owner=GpuOwner(kind, vms), mig=mig or Mig(), vgpu=vgpu or Vgpu())


MIG_ON = Mig(mode="enabled", pending_mode="enabled")
SLICE_A = MigInstance("3g.40gb", 0, 4, vm="mig-infer-a")


def test_whole_gpu_holders_are_said_as_such():
    assert owner_text(_gpu("vfio", ("train-a",))) == "vfio→train-a"
    assert owner_text(_gpu("host", ("train-c",))) == "host→train-c (config)"
    assert owner_text(_gpu("unbound", ("train-c",))) == "unbound→train-c (config)"
    assert owner_text(_gpu("host")) == "host"
    # MIG on, no slice in use, train-c's config holds the whole GPU: not "mig→train-c"
    assert owner_text(_gpu("mig", ("train-c",), MIG_ON)) == "mig; train-c (config)"


def test_slice_and_vgpu_users_keep_the_arrow():
    mig = Mig(mode="enabled", pending_mode="enabled", instances=(SLICE_A,))
    vgpu = Vgpu(instances=(VgpuInstance("0000:3a:00.5", "A100-1-10C", "0000:3a:00.5", vm="mig-infer-b"),))
    assert owner_text(_gpu("mig", ("mig-infer-a", "mig-infer-b"), mig, vgpu)) == "mig→mig-infer-a,mig-infer-b"
    both = _gpu("mig", ("mig-infer-a", "train-c"), mig)
    assert owner_text(both) == "mig→mig-infer-a; train-c (config)"
    desk = Vgpu(instances=(VgpuInstance("1fee3a89", "GRID A100-4C", "0000:3b:00.0", vm="desk-1"),))
    assert owner_text(_gpu("vgpu", ("desk-1",), vgpu=desk)) == "vgpu→desk-1"


def test_narrow_columns_shorten_without_losing_the_meaning():
    g = _gpu("host", ("train-c",))
    assert owner_text(g, 20) == "host→train-c (cfg)"
    assert owner_text(g, 16) == "host→trai… (cfg)"
    two = _gpu("mig", ("mig-infer-a", "mig-infer-b"), Mig(mode="enabled", instances=(
        SLICE_A, MigInstance("1g.10gb", 6, 1, vm="mig-infer-b"))))
    assert owner_text(two, 16) == "mig→mig-infer-a…"
    for width in (5, 8, 12, 16, 20):
        assert len(owner_text(g, width)) <= width
