"""The seams factories choose every host choice once; the code below them reads values, never a host kind."""
from __future__ import annotations

import ast
from pathlib import Path

from nodeconsole.console.host_programs import CapturedTree, Commands, NoCommands, ThisMachine
from nodeconsole.console.kernel_writer import Kernel
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, real_host, simulated_host
from nodeconsole.console.state_dir import AUDIT_DIR_MODE, STATE_DIR_MODE

PACKAGE = Path(__file__).resolve().parents[2]
HOST_KIND_FLAGS = {"is_demo", "demo_dir", "is_this_machine"}


def _modules(*folders: str) -> list[Path]:
    return [p for folder in folders for p in sorted((PACKAGE / folder).rglob("*.py"))]


def test_this_machine_runs_its_programs_reads_its_live_kernel_log_and_may_be_changed():
    seams = real_host("/", libvirt_uri="test:///default")
    assert isinstance(seams.writes, ThisMachine) and not isinstance(seams.writes, CapturedTree)
    assert type(seams.writes.commands(seams.root)) is Commands
    assert isinstance(seams.writes.kernel(seams.root), Kernel)
    assert seams.audit_dir == Path("/var/log/nodeconsole") and seams.state_mode == AUDIT_DIR_MODE
    assert seams.read_only_reason == "" and seams.live_kernel_log and seams.local_programs
    assert seams.guests_unreachable == "" and seams.host_option == "" and seams.origin == "live"


def test_a_captured_tree_is_read_only_and_runs_none_of_this_machines_programs(tmp_path):
    seams = real_host(str(tmp_path))
    assert isinstance(seams.writes, CapturedTree)
    assert isinstance(seams.writes.commands(seams.root), NoCommands)
    assert seams.audit_dir == tmp_path / "var/log/nodeconsole" and seams.state_mode == AUDIT_DIR_MODE
    assert seams.read_only_reason.startswith("a captured tree (--root) is read-only")
    assert not seams.live_kernel_log and not seams.local_programs
    assert seams.guests_unreachable == "a captured host's VMs cannot be reached from this machine"
    assert seams.origin == "tree" and seams.host_option == "" and seams.open_vm_backend() is None


def test_a_simulated_host_stands_for_root_keeps_its_state_private_and_names_itself_in_printed_commands(tmp_path):
    node = tmp_path / "libvirt.xml"
    node.write_text("<node/>")
    seams = simulated_host(Root(tmp_path / "root"), f"test://{node}", tmp_path)
    assert seams.privileged() is True
    assert seams.audit_dir == tmp_path and seams.state_mode == STATE_DIR_MODE
    assert seams.read_only_reason == "" and not seams.live_kernel_log and not seams.local_programs
    assert seams.host_option == "--demo" and seams.origin == "demo"
    assert "simulated" in seams.guests_unreachable
    assert type(seams.open_vm_backend()).__name__ == "NodeFileDomainConfig"
    assert type(seams.writes.kernel(seams.root)).__name__ == "SimulatedKernel"


def test_the_boot_id_is_read_where_the_seams_say(tmp_path):
    (tmp_path / "boot").write_text("abc\n")
    assert Seams(root=Root(tmp_path), libvirt_uri=None, boot_id_file="boot").boot_id() == "abc"
    assert Seams(root=Root(tmp_path), libvirt_uri=None).boot_id() == ""


def test_seams_have_no_host_kind_flags():
    seams = Seams(root=Root("/nonexistent"), libvirt_uri=None)
    assert not any(hasattr(seams, flag) for flag in HOST_KIND_FLAGS)


def test_nothing_below_the_seams_factory_asks_which_host_this_is():
    found = []
    for path in _modules("console", "actions", "screens"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "console/seams.py" or rel.startswith("console/demo/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in HOST_KIND_FLAGS:
                found.append(f"{rel}:{node.lineno} .{node.attr}")
    assert found == []


def test_the_seams_and_the_host_write_implementations_import_nothing_from_actions():
    modules = ["console/seams.py", "console/host_seams.py", "console/kernel_writer.py", "console/host_programs.py",
               "console/state_dir.py", "console/demo/node_domains.py", *[
                   p.relative_to(PACKAGE).as_posix() for p in _modules("console/vms")]]
    found = []
    for rel in modules:
        for node in ast.walk(ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{rel}:{node.lineno} {n}" for n in names if n.startswith("nodeconsole.actions")]
    assert found == []
