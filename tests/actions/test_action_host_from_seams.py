"""ActionHost.from_seams assembles what the seams chose; it decides nothing itself."""
from __future__ import annotations

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.mig_persist import _command
from nodeconsole.console.host_programs import NoCommands
from nodeconsole.console.root import Root
from nodeconsole.console.seams import Seams, real_host, simulated_host
from nodeconsole.console.state_dir import STATE_DIR_MODE


class _Writes:
    def __init__(self) -> None:
        self.kernel_obj, self.commands_obj = object(), object()

    def kernel(self, root):
        return self.kernel_obj

    def commands(self, root):
        return self.commands_obj


def test_every_field_comes_from_the_seams(tmp_path):
    writes = _Writes()
    seams = Seams(root=Root(tmp_path), libvirt_uri=None, state_dir=tmp_path / "state", state_mode=0o711,
                  writes=writes, privileged=lambda: True, read_only_reason="because", vm_backend=lambda uri: None)
    host = ActionHost.from_seams(seams)
    assert host.kernel is writes.kernel_obj and host.commands is writes.commands_obj
    assert host.state_dir == tmp_path / "state" and host.dir_mode == 0o711 and host.is_root() is True
    assert host.read_only_reason == "because" and host.domains is None
    assert host.audit.path == tmp_path / "state" / "audit.jsonl"


def test_a_captured_tree_host_is_read_only_without_this_machines_programs(tmp_path):
    host = ActionHost.from_seams(real_host(str(tmp_path)))
    assert isinstance(host.commands, NoCommands) and host.read_only_reason
    assert host.state_dir == tmp_path / "var/log/nodeconsole"


def test_the_demo_host_stands_for_root_and_its_printed_commands_name_it(tmp_path):
    host = ActionHost.from_seams(simulated_host(Root(tmp_path), None, tmp_path))
    assert host.is_root() is True and host.dir_mode == STATE_DIR_MODE and host.read_only_reason == ""
    assert _command(host).endswith("mig restore --apply --yes --demo")
    assert _command(ActionHost.from_seams(real_host(str(tmp_path)))).endswith("mig restore --apply --yes")
