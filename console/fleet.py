"""The fleet as Prometheus sees it: every host's nodeconsole_ metrics, read back through Prometheus's
HTTP API (instant queries) and turned into one report per host (the `instance` label).

Per host: GPUs by owner kind, unhealthy and degraded GPUs with their reasons (the host's own health
verdict, `nodeconsole_gpu_health` and `nodeconsole_gpu_health_reason`: fleet judges nothing itself, so it
says what the host's console and doctor say), VMs whose vCPUs are not on their GPUs' NUMA nodes, failing
doctor checks, and drift: where the host's driver, kernel, libvirt, MIG layout or a
doctor check's status differs from the most common value across the fleet. A value shared by no
strict plurality (a tie) has no majority and makes no drift.
"""
from __future__ import annotations

import shlex
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodeconsole.console.fleet_answer import AnswerError, FleetError
from nodeconsole.console.fleet_http import http_fetch
from nodeconsole.console.gpu_events import DEGRADED, UNHEALTHY
from nodeconsole.console.hosttext import visible

__all__ = ["AnswerError", "FleetError", "check_url", "fleet_report", "http_fetch", "render_text", "ssh_host"]

# instant queries; each answer is a vector of {metric: labels, value: [time, "number"]}
QUERIES = {
    "host": "nodeconsole_host_info",
    "gpu": "nodeconsole_gpu_info",
    "health": "nodeconsole_gpu_health == 1",
    "reason": "nodeconsole_gpu_health_reason == 1",
    "mig": "nodeconsole_gpu_mig_instances",
    "misaligned": "nodeconsole_vm_numa_aligned == 0",
    "doctor": "nodeconsole_doctor_check == 1",
    "source_down": "nodeconsole_source_up == 0",
    "drained": "nodeconsole_gpu_drained == 1",
}
DRIFT_FIELDS = ("driver", "kernel", "libvirt", "mig")

Fetch = Callable[[str], Any]


def check_url(url: str) -> str:
    """The Prometheus base URL without a trailing slash; ValueError when it is not http(s)://HOST."""
    u = urllib.parse.urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.netloc or u.query or u.fragment:
        raise ValueError(f"--prometheus {url!r}: expected http(s)://HOST[:PORT][/PATH]")
    try:
        u.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"--prometheus {url!r}: bad port") from None
    return url.strip().rstrip("/")


@dataclass
class Host:
    instance: str
    hostname: str = ""
    driver: str = ""
    kernel: str = ""
    libvirt: str = ""
    hypervisor: str = "libvirt"  # host_info's label ("libvirt" from an exporter that predates it)
    gpus_by_owner: dict[str, int] = field(default_factory=dict)
    unhealthy: dict[str, dict[str, Any]] = field(default_factory=dict)  # address → GPU and reasons
    degraded: dict[str, dict[str, Any]] = field(default_factory=dict)
    drained: dict[str, dict[str, Any]] = field(default_factory=dict)  # address → GPU (admins' drain marks)
    misaligned_vms: list[str] = field(default_factory=list)
    doctor: dict[str, str] = field(default_factory=dict)  # check → status
    mig: dict[str, int] = field(default_factory=dict)  # profile → instances
    sources_down: list[str] = field(default_factory=list)
    drift: list[dict[str, str]] = field(default_factory=list)

    @property
    def mig_layout(self) -> str:
        return ",".join(f"{p}={n}" for p, n in sorted(self.mig.items())) or "none"

    @property
    def console(self) -> str:
        """The command opening the host's console; "" when the instance names no usable ssh host."""
        host = ssh_host(self.instance)
        return f"ssh -t {shlex.quote(host)} nodeconsole" if host else ""

    def value(self, name: str) -> str:
        return self.mig_layout if name == "mig" else str(getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance, "hostname": self.hostname, "hypervisor": self.hypervisor,
                "versions": {"driver": self.driver, "kernel": self.kernel, "libvirt": self.libvirt},
                "gpus_by_owner": dict(sorted(self.gpus_by_owner.items())),
                "unhealthy_gpus": [self.unhealthy[a] for a in sorted(self.unhealthy)],
                "degraded_gpus": [self.degraded[a] for a in sorted(self.degraded)],
                "drained_gpus": [self.drained[a] for a in sorted(self.drained)],
                "misaligned_vms": sorted(self.misaligned_vms),
                "failing_checks": sorted(c for c, s in self.doctor.items() if s == "fail"),
                "mig_layout": dict(sorted(self.mig.items())),
                "sources_down": sorted(self.sources_down),
                "drift": self.drift, "console": self.console}


def ssh_host(instance: str) -> str:
    """The host part of an `instance` label of any shape (`name:port`, `[v6]:port`, a bare IPv6
    address, `gpu[01]:9842`, no port); "" when it is empty, holds a space or control character, or would
    be read by ssh as an option (`-oProxyCommand=…`)."""
    if instance.startswith("[") and "]" in instance:  # [v6] or [v6]:port
        host, rest = instance[1:].split("]", 1)
        if rest and not (rest[0] == ":" and rest[1:].isdigit()):
            host = instance
    elif instance.count(":") == 1 and instance.rsplit(":", 1)[1].isdigit():
        host = instance.rsplit(":", 1)[0]
    else:
        host = instance
    if not host or host.startswith("-") or any(c.isspace() or not c.isprintable() for c in host):
        return ""
    return host


def _num(s: dict[str, Any]) -> float:
    try:
        return float(s["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return 0.0


def _majority(values: list[str]) -> str | None:
    """The most common value; None when the top count is tied (or there are no values)."""
    top = Counter(values).most_common(2)
    if not top or (len(top) == 2 and top[0][1] == top[1][1]):
        return None
    return top[0][0]


def _health(states: list[dict[str, Any]], reasons: list[dict[str, Any]], host: Callable[[dict[str, Any]], Host]) -> None:
    """Each host's unhealthy and degraded GPUs, from the verdict its exporter serves, with their reasons."""
    why: dict[tuple[str, str], list[str]] = {}
    for s in reasons:
        m = s.get("metric", {})
        why.setdefault((str(m.get("instance", "")), str(m.get("address", ""))), []).append(str(m.get("reason", "")))
    for s in states:
        m, h = s.get("metric", {}), host(s)
        state, addr = str(m.get("state", "")), str(m.get("address", ""))
        into = h.unhealthy if state == UNHEALTHY else h.degraded if state == DEGRADED else None
        if into is not None:
            into[addr] = {"address": addr, "index": m.get("index", ""), "model": m.get("model", ""), "state": state,
                          "reasons": sorted(set(why.get((h.instance, addr), [])))}


def _version_drift(ordered: list[Host]) -> dict[str, Any]:
    """The majority of each drift field, each host's drift from it noted; libvirt's version counts only
    among libvirt hosts (a Proxmox VE host has none)."""
    majority: dict[str, Any] = {}
    for name in DRIFT_FIELDS:
        # libvirt's version is a libvirt host's: a Proxmox VE host (no libvirt) is not drift from it
        among = [h for h in ordered if name != "libvirt" or h.hypervisor == "libvirt"]
        maj = _majority([h.value(name) for h in among])
        majority[name] = maj
        if maj is None:
            continue
        for h in among:
            if h.value(name) != maj:
                h.drift.append({"field": name, "value": h.value(name), "majority": maj})
    return majority


def fleet_report(fetch: Fetch) -> dict[str, Any]:
    """Ask Prometheus (through `fetch`) and build {"hosts": [...], "majority": {...}}."""
    res = {key: fetch(q) for key, q in QUERIES.items()}
    hosts: dict[str, Host] = {}

    def host(s: dict[str, Any]) -> Host:
        inst = str(s.get("metric", {}).get("instance", ""))
        return hosts.setdefault(inst, Host(inst))

    for s in res["host"]:
        m, h = s.get("metric", {}), host(s)
        h.hostname, h.driver, h.kernel, h.libvirt = (str(m.get(k, "")) for k in ("hostname", "driver", "kernel", "libvirt"))
        h.hypervisor = str(m.get("hypervisor") or "libvirt")
    for s in res["gpu"]:
        owner = str(s.get("metric", {}).get("owner", "")) or "unknown"
        h = host(s)
        h.gpus_by_owner[owner] = h.gpus_by_owner.get(owner, 0) + 1
    _health(res["health"], res["reason"], host)
    for s in res["drained"]:  # the reason, who and when stay on the host (`snapshot --json`, its console)
        m = s.get("metric", {})
        host(s).drained[str(m.get("address", ""))] = {"address": str(m.get("address", "")),
                                                       "index": m.get("index", ""), "model": m.get("model", "")}
    for s in res["mig"]:
        prof = str(s.get("metric", {}).get("profile", ""))
        h = host(s)
        h.mig[prof] = h.mig.get(prof, 0) + int(_num(s))
    for s in res["misaligned"]:
        vm = str(s.get("metric", {}).get("vm", ""))
        if vm not in host(s).misaligned_vms:
            host(s).misaligned_vms.append(vm)
    for s in res["doctor"]:
        m = s.get("metric", {})
        host(s).doctor[str(m.get("check", ""))] = str(m.get("status", ""))
    for s in res["source_down"]:
        host(s).sources_down.append(str(s.get("metric", {}).get("source", "")))

    ordered = [hosts[k] for k in sorted(hosts)]
    majority = _version_drift(ordered)
    checks = sorted({c for h in ordered for c in h.doctor})
    doctor_major: dict[str, str | None] = {}
    for c in checks:
        maj = _majority([h.doctor.get(c, "absent") for h in ordered])
        doctor_major[c] = maj
        if maj is None:
            continue
        for h in ordered:
            if h.doctor.get(c, "absent") != maj:
                h.drift.append({"field": f"doctor:{c}", "value": h.doctor.get(c, "absent"), "majority": maj})
    majority["doctor"] = doctor_major
    kinds = Counter(h.hypervisor for h in ordered)
    return {"hosts": [h.to_dict() for h in ordered], "majority": majority, "hypervisors": dict(sorted(kinds.items()))}


def render_text(report: dict[str, Any]) -> list[str]:
    """The report as plain lines (host text is data: no markup, control characters shown as escapes)."""
    hosts = report["hosts"]
    if not hosts:
        return ["no host exports nodeconsole metrics to this Prometheus"]
    maj = report["majority"]
    kinds = ", ".join(f"{k} {n}" for k, n in report.get("hypervisors", {}).items())
    lines = [f"{len(hosts)} host(s) ({kinds or 'hypervisors unknown'}); majority: driver {maj.get('driver') or '-'}, "
             f"kernel {maj.get('kernel') or '-'}, "
             f"libvirt {maj.get('libvirt') or '-'}, MIG {maj.get('mig') or '-'}"]
    for h in hosts:
        owners = ", ".join(f"{k} {v}" for k, v in h["gpus_by_owner"].items()) or "no GPUs"
        lines.append("")
        lines.append(f"{h['instance']} ({h['hostname'] or '?'}): GPUs {owners}")
        for g in (*h["unhealthy_gpus"], *h["degraded_gpus"]):
            lines.append(f"  {g['state']} GPU {g['index']} {g['address']}: {'; '.join(g['reasons'])}")
        for g in h["drained_gpus"]:
            lines.append(f"  drained GPU {g['index']} {g['address']}: no new work until `nodeconsole gpu undrain`")
        if h["misaligned_vms"]:
            lines.append(f"  misaligned VMs: {', '.join(h['misaligned_vms'])}")
        if h["failing_checks"]:
            lines.append(f"  failing checks: {', '.join(h['failing_checks'])}")
        if h["sources_down"]:
            lines.append(f"  sources down: {', '.join(h['sources_down'])}")
        for d in h["drift"]:
            lines.append(f"  drift: {d['field']} {d['value']} (majority {d['majority']})")
        lines.append(f"  console: {h['console'] or 'none (the instance names no ssh host)'}")
    return [visible(line) for line in lines]  # label values are data: a newline in one is shown, not printed
