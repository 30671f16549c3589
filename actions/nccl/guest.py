"""The NCCL check inside a VM: a GPU on vfio-pci (or a VM's vGPU) cannot be tested from the host, so the
check runs in the guest, over SSH or through the QEMU guest agent.

Every program here is an argv list run through a `Runner` seam, and the guest's command is an argv too:
over SSH each of its words goes to ssh as one separate word quoted for the remote shell (ssh joins its
words with spaces and hands them to the guest's shell); through the agent it travels as a JSON
guest-exec request. No shell string is ever built from user text. The only shell text is the fixed
`LINE_BUFFERED` wrapper, which gets the guest argv as its positional parameters.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from nodeconsole.actions.nccl.commands import _check_program, sweep_args, validate_env, validate_host
from nodeconsole.actions.nccl.parse import Parser
from nodeconsole.actions.nccl.run import DEFAULT_TIMEOUT, SweepProgress, SweepResult, sweep_total
from nodeconsole.console.argtypes import close_names
from nodeconsole.console.model import Gpu, HostSnapshot, Vm

METHODS = ("ssh", "agent")
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=15")
# Run the guest argv line-buffered when the guest has stdbuf (rows then arrive as printed over ssh).
LINE_BUFFERED = 'command -v stdbuf >/dev/null 2>&1 && exec stdbuf -oL -eL "$@"; exec "$@"'
AGENT_ENV = "/usr/bin/env"  # guest-exec runs a path; env finds the benchmark on the guest's PATH
ADDRESS_PLACEHOLDER = "GUEST-ADDRESS"  # shown in a plan whose address could not be looked up
_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]{0,31}$")
_ADDR = re.compile(r"\b(?P<proto>ipv4|ipv6)\s+(?P<addr>[0-9A-Fa-f.:]+)(?:/\d+)?\s*$")


class Runner(Protocol):
    """Runs one program to its end: (exit status, stdout, stderr). argv lists only, never a shell."""

    def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]: ...


class SubprocessRunner:
    """This machine's programs."""

    def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        try:
            p = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               errors="replace", timeout=timeout)
        except FileNotFoundError:
            return 127, "", f"{argv[0]}: not found"
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]}: no answer in {timeout:g} s"
        except OSError as e:
            return 126, "", f"{argv[0]}: {e.strerror or e}"
        return p.returncode, p.stdout, p.stderr


class DestinationError(ValueError):
    """A bad ssh destination (given with --ssh)."""


def validate_destination(text: str) -> str:
    """`ADDR` or `USER@ADDR` for ssh: a plain user name and a host name or IP address, nothing an
    ssh option or a shell could read as more."""
    user, sep, addr = text.rpartition("@")
    if sep and not _USER.fullmatch(user):
        raise DestinationError(f"{text!r}: {user!r} is not a user name")
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        try:
            validate_host(addr)
        except ValueError:
            raise DestinationError(f"{text!r}: expected USER@ADDRESS (a host name or IP address)") from None
    return text


def vm_gpus(snap: HostSnapshot, vm: Vm) -> tuple[int, tuple[Gpu, ...]]:
    """(GPUs the guest sees, the host GPUs behind them): a passed-through GPU or a vGPU (an mdev, or a
    GPU's virtual function) each count once; a GPU's audio function does not."""
    by_addr = {d.address: d for d in snap.pci_devices}
    count, gpus = 0, []
    for h in vm.hostdevs:
        if not h.gpu:
            continue
        if h.type == "pci":
            dev = by_addr.get(h.address or "")
            if dev is None or dev.base_class != 0x03:
                continue
        count += 1
        g = snap.gpu(h.gpu)
        if g is not None and g not in gpus:
            gpus.append(g)
    return count, tuple(gpus)


def guest_command(ngpus: int, binary: str = "all_reduce_perf", sweep: Sequence[str] | None = None,
                  env: Mapping[str, str] | None = None) -> list[str]:
    """`env NCCL_DEBUG=INFO all_reduce_perf -b 8 -e 1G -f 2 -g N` for the guest (one process, all its GPUs)."""
    if ngpus < 1:
        raise ValueError("the VM has no GPU")
    exports = validate_env({"NCCL_DEBUG": "INFO", **(env or {})})
    return ["env", *(f"{k}={v}" for k, v in exports.items()), _check_program(binary),
            *(sweep if sweep is not None else sweep_args()), "-g", str(ngpus)]


def ssh_argv(destination: str, guest_argv: Sequence[str], ssh: str = "ssh") -> list[str]:
    """`ssh -o BatchMode=yes … -- DEST sh -c WRAPPER nccl-check GUEST ARGV…`, each remote word quoted."""
    remote = ["sh", "-c", LINE_BUFFERED, "nccl-check", *guest_argv]
    return [ssh, *SSH_OPTIONS, "--", destination, *(shlex.quote(w) for w in remote)]


def virsh(uri: str | None) -> list[str]:
    return ["virsh", *(["-c", uri] if uri else [])]


def agent_exec_argv(uri: str | None, vm: str, guest_argv: Sequence[str]) -> list[str]:
    """`virsh qemu-agent-command --domain VM '{"execute": "guest-exec", …}'` starting the guest argv."""
    argv = list(guest_argv)
    path, args = (AGENT_ENV, argv[1:]) if argv[:1] == ["env"] else (argv[0], argv[1:])
    request = {"execute": "guest-exec", "arguments": {"path": path, "arg": args, "capture-output": True}}
    return [*virsh(uri), "qemu-agent-command", "--domain", vm, json.dumps(request)]


def agent_status_argv(uri: str | None, vm: str, pid: int) -> list[str]:
    request = {"execute": "guest-exec-status", "arguments": {"pid": int(pid)}}
    return [*virsh(uri), "qemu-agent-command", "--domain", vm, json.dumps(request)]


def domifaddr_argv(uri: str | None, vm: str, source: str = "lease") -> list[str]:
    """`virsh domifaddr --domain VM --source lease|agent|arp`."""
    return [*virsh(uri), "domifaddr", "--domain", vm, "--source", source]


def parse_domifaddr(text: str) -> str | None:
    """The first IPv4 address of `virsh domifaddr`'s table (else the first IPv6 one that is not
    link-local or loopback), without its prefix length."""
    v4: list[str] = []
    v6: list[str] = []
    for line in text.splitlines():
        m = _ADDR.search(line)
        if not m:
            continue
        try:
            ip = ipaddress.ip_address(m.group("addr"))
        except ValueError:
            continue
        if ip.is_loopback or ip.is_link_local:
            continue
        (v4 if ip.version == 4 else v6).append(str(ip))
    found = v4 or v6
    return found[0] if found else None


def find_address(runner: Runner, uri: str | None, vm: str, timeout: float = 10.0) -> tuple[str | None, str]:
    """(address, where it came from or why none was found): libvirt's DHCP lease, else the guest agent."""
    tried = []
    for source in ("lease", "agent"):
        rc, out, err = runner.run(domifaddr_argv(uri, vm, source), timeout)
        addr = parse_domifaddr(out) if rc == 0 else None
        if addr:
            return addr, f"from `virsh domifaddr --source {source}`"
        tried.append(f"{source}: {(err.strip().splitlines() or ['no address'])[-1]}")
    return None, "; ".join(tried)


@dataclass(frozen=True)
class GuestPlan:
    """A check inside one VM: what runs in the guest, what runs here, and why it cannot run (if so)."""
    vm: str
    method: str  # "ssh" or "agent"
    ngpus: int  # GPUs the guest sees
    gpus: tuple[Gpu, ...]  # the host GPUs behind them
    guest_argv: list[str]
    argv: list[str]  # what this machine runs
    address_note: str = ""  # where the ssh address came from
    refusal: str = ""  # why it cannot run from here ("" when it can)

    def to_dict(self) -> dict[str, object]:
        return {"vm": self.vm, "method": self.method, "guest_gpus": self.ngpus,
                "gpus": [{"index": g.index, "address": g.address, "name": g.name} for g in self.gpus],
                "guest_argv": self.guest_argv, "argv": self.argv, "address": self.address_note or None,
                "refusal": self.refusal or None}


def find_vm(snap: HostSnapshot, name: str) -> Vm:
    for vm in snap.vms:
        if vm.name == name:
            return vm
    near = close_names(name, [v.name for v in snap.vms])
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise ValueError(f"no VM named {name!r} on this host{hint}")


def plan_guest_check(snap: HostSnapshot, vm_name: str, *, method: str = "ssh", destination: str | None = None,
                     binary: str | None = None, sweep: Sequence[str] | None = None, uri: str | None = None,
                     reachable: str = "", runner: Runner | None = None) -> GuestPlan:
    """The check inside VM `vm_name`. ValueError for bad input (unknown VM, bad destination, a VM
    without a GPU). `reachable` non-empty says why this host's guests cannot be reached (the demo, a
    captured tree): the plan is then made without asking libvirt and carries that as its refusal."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    if destination is not None and method != "ssh":
        raise DestinationError("an ssh destination goes with the ssh method, not the guest agent")
    vm = find_vm(snap, vm_name)
    ngpus, gpus = vm_gpus(snap, vm)
    if not ngpus:
        raise ValueError(f"VM {vm.name} holds no GPU (nothing to test inside it)")
    guest = guest_command(ngpus, binary or "all_reduce_perf", sweep)
    stopped = f"VM {vm.name} is {vm.state}: the check runs inside a running guest" if vm.state != "running" else ""
    refusal = "; ".join(r for r in (stopped, reachable) if r)
    note = ""
    if method == "agent":
        return GuestPlan(vm.name, method, ngpus, gpus, guest, agent_exec_argv(uri, vm.name, guest), refusal=refusal)
    if destination is not None:
        dest, note = validate_destination(destination), "given with --ssh"
    elif refusal:
        dest, note = ADDRESS_PLACEHOLDER, "the guest's address, from `virsh domifaddr` or --ssh USER@ADDR"
    else:
        addr, note = find_address(runner or SubprocessRunner(), uri, vm.name)
        if addr is None:
            dest = ADDRESS_PLACEHOLDER
            refusal = f"no address known for VM {vm.name} ({note}): give --ssh USER@ADDR"
        else:
            dest = addr
    return GuestPlan(vm.name, method, ngpus, gpus, guest, ssh_argv(dest, guest), note, refusal)


# -- the guest agent's run ---------------------------------------------------------------------------------
def _agent_return(out: str) -> dict[str, object]:
    try:
        data = json.loads(out)
    except ValueError:
        raise ValueError(f"the guest agent's answer is not JSON: {out.strip()[:200]!r}") from None
    ret = data.get("return") if isinstance(data, dict) else None
    if not isinstance(ret, dict):
        raise ValueError(f"the guest agent's answer has no result: {out.strip()[:200]!r}")
    return ret


def _b64(value: object) -> str:
    return base64.b64decode(value).decode("utf-8", "replace") if isinstance(value, str) and value else ""


@dataclass
class AgentRun:
    """The check through the guest agent: guest-exec, then guest-exec-status polls until it exits. The
    agent hands the output over only at the end, so rows (and progress) come all at once."""
    runner: Runner
    uri: str | None
    vm: str
    guest_argv: list[str]
    timeout: float | None = DEFAULT_TIMEOUT
    poll: float = 1.0
    on_progress: Callable[[SweepProgress], None] | None = None
    call_timeout: float = 30.0  # one virsh call
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    pid: int | None = None
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _killed: bool = False

    @property
    def argv(self) -> list[str]:
        return agent_exec_argv(self.uri, self.vm, self.guest_argv)

    def cancel(self) -> None:
        """Stop the check in the guest (from any thread, or after Ctrl-C ended `run`)."""
        self._cancelled.set()
        self._kill()

    def _kill(self) -> None:
        if self.pid is not None and not self._killed:  # env exec'd the benchmark: the pid is the benchmark's
            self._killed = True
            self.runner.run(agent_exec_argv(self.uri, self.vm, ["env", "kill", "-TERM", str(self.pid)]),
                            self.call_timeout)

    def run(self) -> SweepResult:
        parser = Parser()
        started = self.clock()
        rc, out, err = self.runner.run(self.argv, self.call_timeout)
        if rc != 0:
            return SweepResult(self.argv, parser.out, None, error=(err.strip() or out.strip() or f"virsh exit {rc}"))
        try:
            pid = _agent_return(out).get("pid")
            if not isinstance(pid, int):
                raise ValueError(f"guest-exec gave no pid: {out.strip()[:200]!r}")
        except ValueError as e:
            return SweepResult(self.argv, parser.out, None, error=str(e))
        self.pid = pid
        timed_out = cancelled = False
        status: dict[str, object] = {}
        while True:
            if self._cancelled.is_set():
                cancelled = True
            elif self.timeout is not None and self.clock() - started >= self.timeout:
                timed_out = True
            if cancelled or timed_out:
                self._kill()
                break
            rc, out, err = self.runner.run(agent_status_argv(self.uri, self.vm, pid), self.call_timeout)
            if rc == 0:
                try:
                    status = _agent_return(out)
                except ValueError:
                    status = {}
                if status.get("exited"):
                    break
            self.sleep(self.poll)
        stdout, stderr = _b64(status.get("out-data")), _b64(status.get("err-data"))
        total = sweep_total(self.guest_argv)
        for line in stdout.splitlines():
            row = parser.feed(line)
            if row is not None and self.on_progress is not None:
                self.on_progress(SweepProgress(len(parser.out.rows), total, row))
        code = status.get("exitcode")
        sig = status.get("signal")
        exit_code = (-sig if isinstance(sig, int) else code if isinstance(code, int) else None) \
            if status.get("exited") else None
        return SweepResult(self.argv, parser.out, exit_code, timed_out=timed_out, cancelled=cancelled,
                         stderr_tail=stderr.splitlines()[-200:], stdout_tail=stdout.splitlines()[-200:],
                         duration_s=self.clock() - started)
