"""GPU passthrough and release, end to end on generated hosts: the simulated kernel reacts to the sysfs
writes as Linux does, libvirt config lives in the node file, and every check re-reads the host.

"Nothing changed" is checked on the whole host directory: every file's bytes and every link's target."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from nodeconsole.actions.audit import APPLIED, FAILED, IN_PROGRESS, INTERRUPTED
from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import MODPROBE_FILE
from nodeconsole.actions.lock import HostLock
from nodeconsole.actions.passthrough import plan_passthrough, plan_release, resolve_gpu
from nodeconsole.actions.plan import RequestError, needs_typed_confirmation
from nodeconsole.actions.progress import DONE, FAILED_RESULT, REFUSED
from nodeconsole.actions.runner import Runner
from nodeconsole.actions.undo import plan_undo
from nodeconsole.console.demo.generator import generate, small_spec
from nodeconsole.console.demo.nvml_sim import SimulatedNvml
from nodeconsole.console.host_programs import Commands, NoCommands
from nodeconsole.console.root import Root
from nodeconsole.console.seams import demo_host, simulated_host

IDLE, IDLE_AUDIO = "0000:9a:00.0", "0000:9a:00.1"  # demo: idle on nvidia; shut-off train-c holds it
BUSY = "0000:18:00.0"  # processes
IN_VM = "0000:19:00.0"  # vfio-pci, train-a running
VGPU = "0000:3b:00.0"  # time-sliced vGPUs
SHARED_GROUP = "0000:bb:00.0"  # IOMMU group with an NVMe and a NIC
AUDIT = "audit.jsonl"


def tree_state(path: Path, skip: tuple[str, ...] = (AUDIT,)) -> dict[str, str]:
    """Digest of every file and link target below `path` (directories included, so an empty leftover
    directory counts as a change). One scandir per directory: no extra stat per entry."""
    out: dict[str, str] = {}
    pending = [("", str(path))]
    while pending:
        rel_dir, real = pending.pop()
        with os.scandir(real) as entries:
            for e in entries:
                rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
                if e.is_symlink():
                    out[rel] = "link:" + os.readlink(e.path)
                elif e.is_dir():
                    out[rel] = "dir"
                    pending.append((rel, e.path))
                elif rel not in skip:
                    with open(e.path, "rb") as f:
                        out[rel] = hashlib.sha256(f.read()).hexdigest()
    return out


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


@pytest.fixture
def demo(tmp_path) -> ActionHost:
    """A fresh demo host in a temporary state directory."""
    return ActionHost.from_seams(demo_host(tmp_path / "demo"))


@pytest.fixture(scope="module")
def demo_ro(tmp_path_factory) -> ActionHost:
    """One demo host shared by the tests that must change nothing (each one checks that it did not)."""
    return ActionHost.from_seams(demo_host(tmp_path_factory.mktemp("demo-ro")))


def _generated(spec, dest: Path) -> ActionHost:
    h = generate(spec, dest)
    root = Root(h.root)
    seams = simulated_host(root=root, libvirt_uri=h.libvirt_uri, nvml_lib=SimulatedNvml.from_file(h.nvml_state, root=root),
                  state_dir=h.dest)
    return ActionHost.from_seams(seams)


def _dir(host: ActionHost) -> Path:
    return host.state_dir


def _driver(host: ActionHost, address: str) -> str | None:
    return host.root.link_name(f"sys/bus/pci/devices/{address}/driver")


# -- the happy path -----------------------------------------------------------------------------------

def test_passthrough_to_vm_with_persist_then_undo_restores_exactly(demo):
    before = tree_state(_dir(demo))
    snap = demo.snapshot()
    plan = plan_passthrough(demo, snap, "4", vm="build-1", persist=True)
    assert plan.ok and plan.request["gpu"] == IDLE
    # the demo host has driverctl: persistence is per device (an ids= line would take every H100)
    assert [s.op["kind"] for s in plan.steps] == ["pci_driver", "pci_driver", "driverctl", "driverctl",
                                                  "vm_hostdev", "vm_hostdev"]
    # train-c's config also holds the GPU: the TUI must make the admin type the address
    assert needs_typed_confirmation(plan) == IDLE
    events = []
    res = Runner(demo).run(plan, confirm=lambda p: True, progress=events.append)
    assert res.status == DONE, res.message
    assert [e.phase for e in events if e.phase in ("ok", "failed")] == ["ok"] * 6

    after = demo.snapshot()
    gpu = after.gpu(IDLE)
    assert gpu.driver == "vfio-pci" and gpu.owner.kind == "vfio"
    assert _driver(demo, IDLE_AUDIO) == "vfio-pci"
    assert demo.root.exists(f"dev/vfio/{gpu.iommu_group}")
    assert {h.address for h in after.vm("build-1").hostdevs} == {IDLE, IDLE_AUDIO}
    assert "build-1" in gpu.owner.vms
    for a in (IDLE, IDLE_AUDIO):  # driverctl keeps one override per device
        assert demo.root.read(f"etc/driverctl.d/pci-{a}") == "vfio-pci"
    assert demo.root.read(MODPROBE_FILE) is None

    rec = demo.audit.find(res.record_id).to_json()
    assert rec["result"] == APPLIED and rec["action"] == "passthrough"
    assert rec["request"] == {"gpu": IDLE, "gpu_name": "NVIDIA H100 80GB HBM3", "given": "4", "vm": "build-1",
                              "persist": True, "vm_state": "shut off"}
    assert rec["steps"][0]["commands"] == [
        f"echo vfio-pci > /sys/bus/pci/devices/{IDLE}/driver_override",
        f"echo {IDLE} > /sys/bus/pci/devices/{IDLE}/driver/unbind",
        f"echo {IDLE} > /sys/bus/pci/drivers_probe"]
    assert rec["undo"][-1] == {"kind": "pci_driver", "device": IDLE, "override": None, "driver": "nvidia",
                               "group": gpu.iommu_group}

    # the same request again: nothing to do
    assert plan_passthrough(demo, after, IDLE, vm="build-1", persist=True).empty

    undo = plan_undo(demo)
    assert undo.undoes == res.record_id and len(undo.steps) == 6
    assert Runner(demo).run(undo).status == DONE
    assert changed(before, tree_state(_dir(demo))) == set()
    snap2 = demo.snapshot()
    assert snap2.gpu(IDLE).driver == "nvidia"
    assert snap2.vm("build-1").hostdevs == ()


def test_passthrough_to_the_vm_that_already_has_it(demo):
    plan = plan_passthrough(demo, demo.snapshot(), IDLE, vm="train-c")
    assert [s.title for s in plan.steps] == [f"Bind {IDLE} to vfio-pci", f"Bind {IDLE_AUDIO} to vfio-pci"]
    assert needs_typed_confirmation(plan) is None
    assert Runner(demo).run(plan).ok
    assert plan_passthrough(demo, demo.snapshot(), IDLE, vm="train-c").empty
    assert plan_passthrough(demo, demo.snapshot(), IDLE).empty


def test_release_gives_back_what_passthrough_took_and_its_undo_restores(demo):
    start = tree_state(_dir(demo))
    assert Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE, vm="build-1", persist=True)).ok
    passed = tree_state(_dir(demo))
    plan = plan_release(demo, demo.snapshot(), IDLE)
    kinds = [s.op["kind"] for s in plan.steps]
    assert kinds == ["vm_hostdev"] * 2 + ["driverctl", "driverctl", "pci_driver", "pci_driver"]
    # train-c's config held the GPU before the passthrough: release leaves it there, and says so
    assert {s.op["vm"] for s in plan.steps[:2]} == {"build-1"}
    assert any(n.startswith("train-c's config names the GPU too") and "left alone" in n for n in plan.notes)
    assert needs_typed_confirmation(plan) == IDLE
    # the drivers it goes back to come from the audit of the passthrough
    assert [s.title for s in plan.steps[4:]] == [f"Give {IDLE_AUDIO} back to snd_hda_intel", f"Give {IDLE} back to nvidia"]
    res = Runner(demo).run(plan)
    assert res.status == DONE, res.message
    snap = demo.snapshot()
    assert snap.gpu(IDLE).driver == "nvidia" and snap.gpu(IDLE).owner.vms == ("train-c",)
    assert _driver(demo, IDLE_AUDIO) == "snd_hda_intel"
    assert changed(start, tree_state(_dir(demo))) == set()  # the demo as generated, byte for byte
    # no passthrough in effect any more: a release now plans from the host, train-c's config included
    assert [s.op.get("vm") for s in plan_release(demo, snap, IDLE).steps] == ["train-c", "train-c"]
    # undo the release: back to the passed-through state, byte for byte
    assert Runner(demo).run(plan_undo(demo)).ok
    assert changed(passed, tree_state(_dir(demo))) == set()
    # the passthrough is in effect again: a release gives back what it took, again
    again = plan_release(demo, demo.snapshot(), IDLE)
    assert {s.op["vm"] for s in again.steps if s.op["kind"] == "vm_hostdev"} == {"build-1"}


def test_release_without_audit_probes_the_default_driver(demo):
    """A GPU put on vfio-pci by someone else: no record says what it had; the kernel's default binds."""
    snap = demo.snapshot()
    plan = plan_release(demo, snap, "0000:9b:00.0")  # train-b runs with it
    assert not plan.ok and "train-b is running" in plan.refusal
    demo.kernel.write(f"sys/bus/pci/devices/{IDLE}/driver_override", "vfio-pci")
    demo.kernel.write(f"sys/bus/pci/devices/{IDLE}/driver/unbind", IDLE)
    demo.kernel.write("sys/bus/pci/drivers_probe", IDLE)
    assert _driver(demo, IDLE) == "vfio-pci"
    plan = plan_release(demo, demo.snapshot(), IDLE)
    titles = [s.title for s in plan.steps]
    assert f"Give {IDLE} back to its host driver" in titles
    assert Runner(demo).run(plan).ok
    assert _driver(demo, IDLE) == "nvidia"


# -- refusals -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu,fragment", [
    (BUSY, "pid 4242 python3"),
    (IN_VM, "VM train-a is running with it"),
    (VGPU, "vGPU instance"),
    (SHARED_GROUP, "shares group 34 with 0000:bd:00.0 Non-Volatile memory controller bound to nvme"),
    ("0000:ba:00.0", "0000:bc:00.0 Ethernet controller bound to mlx5_core"),
    ("0000:3a:00.0", "0000:3a:00.0 has 4 VFs enabled"),
])
def test_refusals_change_nothing(demo_ro, gpu, fragment):
    before = tree_state(_dir(demo_ro), skip=())
    plan = plan_passthrough(demo_ro, demo_ro.snapshot(), gpu, vm="build-1", persist=True)
    assert not plan.ok and fragment in plan.refusal
    assert "Refused: nothing will be changed." in plan.lines()
    res = Runner(demo_ro).run(plan, confirm=lambda p: pytest.fail("asked to confirm a refused plan"))
    assert res.status == REFUSED and fragment in res.message
    assert changed(before, tree_state(_dir(demo_ro), skip=())) == set()


@pytest.mark.parametrize("text,fragment", [
    ("../../etc", "'../../etc' is not a GPU"),
    ("0000:zz:00.0", "'0000:zz:00.0' is not a GPU"),
    ("99", "no GPU with index 99"),
    ("0000:49:00.0", "is not an NVIDIA GPU"),
    ("0000:77:00.0", "no PCI device 0000:77:00.0"),
    ("GPU-00000000-0000-0000-0000-000000000000", "no GPU with UUID"),
    ("", "is not a GPU"),
])
def test_malformed_or_unknown_gpu(demo_ro, text, fragment):
    snap = demo_ro.snapshot()
    with pytest.raises(RequestError) as e:
        plan_passthrough(demo_ro, snap, text)
    assert fragment in str(e.value) and "4 (0000:9a:00.0)" in str(e.value)  # lists what exists
    with pytest.raises(RequestError):
        plan_release(demo_ro, snap, text)


def test_gpu_by_index_address_and_uuid(demo_ro):
    snap = demo_ro.snapshot()
    gpu = snap.gpu(IDLE)
    assert resolve_gpu(snap, "4") is gpu and resolve_gpu(snap, "9a:00.0") is gpu
    assert resolve_gpu(snap, gpu.uuid.upper()) is gpu and resolve_gpu(snap, "00000000:9A:00.0") is gpu


def test_unknown_vm(demo_ro):
    with pytest.raises(RequestError, match="unknown VM ghost; known VMs: build-1"):
        plan_passthrough(demo_ro, demo_ro.snapshot(), IDLE, vm="ghost")


def test_not_root_and_lock_held_change_nothing(demo_ro):
    before = tree_state(_dir(demo_ro), skip=())
    plan = plan_passthrough(demo_ro, demo_ro.snapshot(), IDLE, vm="build-1", persist=True)
    assert plan.ok
    demo_ro.is_root = lambda: False
    try:
        res = Runner(demo_ro).run(plan)
    finally:
        demo_ro.is_root = lambda: True
    assert res.status == REFUSED and "needs root" in res.message
    with HostLock(demo_ro.state_dir / "nodeconsole.lock"):
        locked = tree_state(_dir(demo_ro), skip=())
        res = Runner(demo_ro).run(plan)
        assert res.status == REFUSED and f"another nodeconsole (pid {os.getpid()})" in res.message
        assert tree_state(_dir(demo_ro), skip=()) == locked
    assert changed(before, tree_state(_dir(demo_ro), skip=())) == set()


def test_iommu_off_gives_the_kernel_command_line_change(tmp_path):
    host = _generated(small_spec(gpus=2, iommu=False), tmp_path / "h")
    before = tree_state(_dir(host), skip=())
    snap = host.snapshot()
    plan = plan_passthrough(host, snap, "1")
    assert not plan.ok and "no IOMMU is active" in plan.refusal
    fix = next(c.fix for c in plan.checks if not c.ok)
    assert "intel_iommu=on" in fix and "reboot" in fix
    assert any("intel_iommu=on" in line for line in plan.lines())
    assert Runner(host).run(plan).status == REFUSED
    assert changed(before, tree_state(_dir(host), skip=())) == set()


def test_host_holders_daemon_and_display(demo):
    # nvidia-persistenced holds every GPU open; a display on the GPU holds it through nvidia_drm
    proc = demo.root.p("proc/3100")
    proc.mkdir(parents=True)
    (proc / "comm").write_text("nvidia-persiste\n")
    plan = plan_passthrough(demo, demo.snapshot(), IDLE)
    assert not plan.ok and "nvidia-persistenced (pid 3100) holds the GPU open" in plan.refusal
    (proc / "comm").write_text("bash\n")
    demo.root.p("sys/module/nvidia_drm").mkdir(parents=True)
    demo.root.p(f"sys/bus/pci/devices/{IDLE}/drm/card1").mkdir(parents=True)
    plan = plan_passthrough(demo, demo.snapshot(), IDLE)
    assert not plan.ok and "nvidia_drm drives a display device" in plan.refusal
    demo.root.p(f"sys/bus/pci/devices/{IDLE}/drm/card1").rmdir()
    assert plan_passthrough(demo, demo.snapshot(), IDLE).ok
    # a process NVML does not list (another PID namespace) with the GPU's device node open
    info = demo.root.p(f"proc/driver/nvidia/gpus/{IDLE}/information")
    info.parent.mkdir(parents=True)
    info.write_text("Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t 4\n")
    (proc / "fd").mkdir()
    os.symlink("/dev/nvidia4", proc / "fd" / "7")
    plan = plan_passthrough(demo, demo.snapshot(), IDLE)
    assert not plan.ok and f"pid 3100 bash has {IDLE} open" in plan.refusal
    os.unlink(proc / "fd" / "7")
    os.symlink("/dev/nvidia5", proc / "fd" / "7")  # another GPU's node
    assert plan_passthrough(demo, demo.snapshot(), IDLE).ok


# -- failure injection ---------------------------------------------------------------------------------

class FailingDomains:
    """Wraps a DomainConfig; the n-th add/remove (0-based) raises."""

    def __init__(self, inner, fail_at: int | None = None) -> None:
        self.inner, self.fail_at, self.calls = inner, fail_at, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _maybe_fail(self):
        n, self.calls = self.calls, self.calls + 1
        if n == self.fail_at:
            raise RuntimeError("libvirt: injected failure")

    def add_hostdev(self, *a, **kw):
        self._maybe_fail()
        return self.inner.add_hostdev(*a, **kw)

    def remove_hostdev(self, *a, **kw):
        self._maybe_fail()
        return self.inner.remove_hostdev(*a, **kw)


def test_failure_at_every_write_leaves_the_host_as_it_was(demo):
    before = tree_state(_dir(demo))
    # one clean run tells how many kernel writes the change makes
    plan = plan_passthrough(demo, demo.snapshot(), IDLE, vm="build-1", persist=True)
    assert Runner(demo).run(plan).ok
    n_writes = len(demo.kernel.writes)
    assert n_writes == 6  # override, unbind, probe for each of the two functions
    assert Runner(demo).run(plan_undo(demo)).ok
    assert changed(before, tree_state(_dir(demo))) == set()
    base = len(demo.audit.records())

    for k in range(n_writes):
        demo.kernel.clear_failures()
        demo.kernel.fail_on(lambda path, text: True, after=k)  # the k-th write of this run fails
        plan = plan_passthrough(demo, demo.snapshot(), IDLE, vm="build-1", persist=True)
        res = Runner(demo).run(plan)
        assert res.status == FAILED_RESULT, (k, res.message)
        assert changed(before, tree_state(_dir(demo))) == set(), k
        rec = demo.audit.find(res.record_id).to_json()
        assert rec["result"] == FAILED and "injected failure" in rec["failed"]["error"]
        assert rec["failed"]["step"] == k // 3 + 1  # three writes per bind step
        assert rec["undone"][0] == rec["failed"]["title"] and len(rec["undone"]) == k // 3 + 1
        assert rec["undo_failed"] == [] and rec["undo"] == []
    demo.kernel.clear_failures()

    real = demo.domains
    for k in range(2):  # libvirt fails on the first, then the second hostdev
        demo.domains = FailingDomains(real, fail_at=k)
        res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE, vm="build-1", persist=True))
        assert res.status == FAILED_RESULT and res.failed_step.startswith("Add 0000:9a:00.")
        assert res.undone[-1] == f"Bind {IDLE} to vfio-pci" and len(res.undone) == 5 + k
        assert changed(before, tree_state(_dir(demo))) == set(), k
    demo.domains = real
    assert len(demo.audit.records()) == base + n_writes + 2
    assert demo.audit.latest_undoable() is None  # failed runs leave nothing to undo


def test_a_write_the_kernel_ignores_fails_verification_and_rolls_back(demo):
    before = tree_state(_dir(demo))
    real_write = demo.kernel.write
    dropped = []

    def dropping(path, text):  # the probe "succeeds" but no driver binds (vfio-pci refused the device)
        if path.endswith("drivers_probe") and text == IDLE_AUDIO and not dropped:
            dropped.append(text)
            return
        real_write(path, text)

    demo.kernel.write = dropping
    res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE, persist=True))
    demo.kernel.write = real_write
    assert res.status == FAILED_RESULT
    assert res.error == f"{IDLE_AUDIO} is bound to no driver, expected vfio-pci"
    assert res.undone == [f"Bind {IDLE_AUDIO} to vfio-pci", f"Bind {IDLE} to vfio-pci"]
    assert changed(before, tree_state(_dir(demo))) == set()


def test_ctrl_c_mid_run_rolls_back(demo):
    before = tree_state(_dir(demo))

    def ctrl_c(event):
        if event.index == 3 and event.phase == "apply":
            raise KeyboardInterrupt  # the admin's ^C

    res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE, vm="build-1", persist=True), progress=ctrl_c)
    assert res.status == FAILED_RESULT and res.interrupted == "SIGINT"
    assert "interrupted by SIGINT at step 3" in res.message and "the host is as it was" in res.message
    assert changed(before, tree_state(_dir(demo))) == set()
    rec = demo.audit.find(res.record_id).to_json()
    assert rec["result"] == INTERRUPTED and rec["interrupted"] == {"signal": "SIGINT", "step": 3}
    assert rec["undo"] == [] and demo.audit.latest_undoable() is None
    assert not (demo.state_dir / "nodeconsole.lock").exists()


class Killed(BaseException):
    """A process killed outright (kill -9): nothing of the runner's rollback runs."""


def test_crash_mid_run_leaves_an_undoable_record(demo):
    before = tree_state(_dir(demo))

    def crash(event):
        if event.index == 3 and event.phase == "apply":
            raise Killed

    with pytest.raises(Killed):
        Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE, vm="build-1", persist=True), progress=crash)
    rec = demo.audit.latest_undoable()
    assert rec.result == IN_PROGRESS and _driver(demo, IDLE) == "vfio-pci"
    assert not (demo.state_dir / "nodeconsole.lock").exists()
    undo = plan_undo(demo)
    assert len(undo.steps) == 2  # only what had been done: the two binds
    assert Runner(demo).run(undo).ok
    assert changed(before, tree_state(_dir(demo))) == set()


# -- persistence through driverctl ------------------------------------------------------------------------

class FakeDriverctl(Commands):
    """driverctl as it behaves on a host: saves the override under /etc/driverctl.d and rebinds."""

    def __init__(self, host: ActionHost, fail: bool = False) -> None:
        self.host, self.fail, self.argvs = host, fail, []

    def which(self, name):
        return "/usr/sbin/driverctl" if name == "driverctl" else None

    def run(self, argv):
        self.argvs.append(list(argv))
        if self.fail:
            return 1, "driverctl: failed to bind"
        assert argv[0] == "driverctl"
        conf = self.host.root.p(f"etc/driverctl.d/pci-{argv[2]}")
        if argv[1] == "set-override":
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(argv[3] + "\n")
        else:
            conf.unlink()
        return 0, ""


def test_persist_with_driverctl(demo):
    before = tree_state(_dir(demo))
    fake = FakeDriverctl(demo)
    demo.commands = fake
    plan = plan_passthrough(demo, demo.snapshot(), IDLE, persist=True)
    persist = [s for s in plan.steps if s.op["kind"] == "driverctl"]
    assert [s.commands for s in persist] == [(f"driverctl set-override {a} vfio-pci",) for a in (IDLE, IDLE_AUDIO)]
    assert not any(s.op["kind"] == "file" for s in plan.steps)
    assert Runner(demo).run(plan).ok
    assert fake.argvs == [["driverctl", "set-override", a, "vfio-pci"] for a in (IDLE, IDLE_AUDIO)]
    assert Runner(demo).run(plan_undo(demo)).ok
    assert fake.argvs[2:] == [["driverctl", "unset-override", a] for a in (IDLE_AUDIO, IDLE)]
    # driverctl.d is left as an empty directory by the fake, as driverctl itself does
    assert changed(before, tree_state(_dir(demo))) <= {"root/etc", "root/etc/driverctl.d"}

    fake.fail = True
    res = Runner(demo).run(plan_passthrough(demo, demo.snapshot(), IDLE, persist=True))
    assert res.status == FAILED_RESULT and "driverctl: failed to bind" in res.error
    assert _driver(demo, IDLE) == "nvidia"


def test_modprobe_fallback_is_refused_when_it_would_take_other_cards(demo):
    """Without driverctl, persistence is an ids= line matching by model: on a host with other cards
    of the model on host drivers that would hand them to vfio-pci at the next boot."""
    demo.commands = NoCommands()
    before = tree_state(_dir(demo))
    plan = plan_passthrough(demo, demo.snapshot(), IDLE, persist=True)
    assert not plan.ok and "would also take 0000:18:00.0" in plan.refusal
    assert "driverctl" in " ".join(c.fix for c in plan.checks if not c.ok)
    assert Runner(demo).run(plan).status == REFUSED
    assert changed(before, tree_state(_dir(demo))) == set()


def test_modprobe_file_when_the_card_is_the_only_one_of_its_model(tmp_path):
    spec_host = generate(small_spec(gpus=1), tmp_path / "h")
    state = json.loads(spec_host.nvml_state.read_text())
    for g in state["gpus"]:
        g["processes"] = []  # an idle card
    spec_host.nvml_state.write_text(json.dumps(state))
    root = Root(spec_host.root)
    host = ActionHost.from_seams(simulated_host(root=root, libvirt_uri=spec_host.libvirt_uri,
                                       nvml_lib=SimulatedNvml.from_file(spec_host.nvml_state, root=root),
                                       state_dir=spec_host.dest))
    host.commands = NoCommands()
    (gpu,) = host.snapshot().gpus
    before = tree_state(host.state_dir)
    res = Runner(host).run(plan_passthrough(host, host.snapshot(), gpu.address, persist=True))
    assert res.ok, res.message
    text = host.root.read(MODPROBE_FILE)
    assert f"# devices: {gpu.address}" in text and "options vfio-pci ids=10de:" in text
    assert "softdep nvidia pre: vfio-pci" in text
    rel = Runner(host).run(plan_release(host, host.snapshot(), gpu.address))
    assert rel.ok, rel.message
    assert host.root.read(MODPROBE_FILE) is None
    assert _driver(host, gpu.address) == "nvidia"
    # /etc/modprobe.d stays (as on every real host); no file other than the audit log differs
    left = {p for p in changed(before, tree_state(host.state_dir)) if not (host.state_dir / p).is_dir()}
    assert left <= {"audit.jsonl"}


def test_a_captured_tree_is_read_only(tmp_path):
    from nodeconsole.console.seams import real_host

    h = generate(small_spec(gpus=2), tmp_path / "h")
    host = ActionHost.from_seams(real_host(str(h.root)))
    assert host.state_dir == h.root / "var/log/nodeconsole" and host.domains is None
    before = tree_state(tmp_path, skip=())
    snap = host.snapshot()
    # a captured tree has no libvirt: which VMs hold the GPU is unknown, so release refuses, naming it
    plan = plan_release(host, snap, "0000:19:00.0")
    assert not plan.ok and "libvirt" in plan.refusal
    plan = plan_passthrough(host, snap, "0000:18:00.0")  # needs no libvirt; the runner refuses it
    res = Runner(host).run(plan)
    assert res.status == REFUSED and "read-only" in host.read_only_reason
    assert changed(before, tree_state(tmp_path, skip=())) == set()
