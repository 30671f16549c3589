"""One name per GPU: the audit log named GPU 4 "NVIDIA H100 80GB HBM3" in its passthrough and "GH100[H100
SXM5 80GB]" (pci.ids' chip name) in its release, made while it was on vfio-pci where NVML cannot see
it. NVML's name, once a change recorded it, is the GPU's name in every later plan's snapshot."""
from __future__ import annotations

import re

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.passthrough import plan_passthrough, plan_release
from nodeconsole.actions.progress import DONE
from nodeconsole.actions.runner import Runner
from nodeconsole.console.seams import demo_host

GPU = "0000:9a:00.0"
NVML_NAME = "NVIDIA H100 80GB HBM3"


def test_a_gpu_keeps_nvmls_name_on_vfio_pci_and_in_the_audit_log(tmp_path):
    host = ActionHost.from_seams(demo_host(tmp_path / "demo"))
    assert host.snapshot().gpu(GPU).name == NVML_NAME
    passed = plan_passthrough(host, host.snapshot(), GPU, vm="build-1")
    assert passed.request["gpu_name"] == NVML_NAME
    assert Runner(host).run(passed).status == DONE
    g = host.snapshot().gpu(GPU)
    assert g.driver == "vfio-pci" and g.nvml_index is None  # NVML cannot see it now…
    assert g.name == NVML_NAME  # …its name is still NVML's
    release = plan_release(host, host.snapshot(), GPU)
    assert Runner(host).run(release).status == DONE
    titles = [r.title for r in host.audit.records()]
    names = {m[1] for t in titles if (m := re.search(rf"\({GPU}, ([^,]+), nvidia-smi", t))}
    assert names == {NVML_NAME}, titles


def test_a_gpu_nvml_never_saw_keeps_the_pci_ids_name(tmp_path):
    host = ActionHost.from_seams(demo_host(tmp_path / "demo"))
    assert host.snapshot().gpu("0000:19:00.0").name == "GH100 [H100 SXM5 80GB]"  # on vfio-pci since generated
