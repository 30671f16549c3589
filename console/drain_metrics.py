"""`nodeconsole_gpu_drained`: the exporter's gauge of the admins' drain marks (console/drains.py), one
sample per GPU (1 drained, 0 not), with the labels of every per-GPU family. The reason, who and when
stay out of the labels (free text, and a new series per reason): `snapshot --json` carries them."""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from nodeconsole.console.model import HostSnapshot

# the exporter's GPU_LABELS (console/exporter.py), in its order: a test holds them equal
LABELS = ("address", "index", "smi", "uuid", "model")


def drain_families(snap: HostSnapshot) -> Iterator[Metric]:
    fam = GaugeMetricFamily("nodeconsole_gpu_drained", "1 when an admin drained the GPU (nodeconsole gpu "
                            "drain): no new work goes on it until it is undrained", labels=list(LABELS))
    for g in snap.gpus:
        fam.add_metric([g.address, str(g.index), "" if g.nvml_index is None else str(g.nvml_index), g.uuid or "",
                        g.name], 1 if g.drain is not None else 0)
    yield fam
