"""A GPU's NVLinks are one type, a tuple, with `nvlink_state` saying what none means (the links read, N/A:
the GPU has no NVLink, None: not read); the snapshot's JSON writes them as before: the links, "N/A" or
null."""
from __future__ import annotations

import pytest

from nodeconsole.console.model import LINKS_READ, NA, Gpu, GpuOwner, NvLink, nvlink_peers, to_jsonable

LINK = NvLink(link=0, active=True, version=4, remote="0000:05:00.0", remote_type="switch")


def _gpu(address="0000:18:00.0", **kw):
    return Gpu(address=address, name="H100", uuid=None, driver="nvidia", numa_node=0, owner=GpuOwner("host"), **kw)


@pytest.mark.parametrize(("links", "state", "json", "read"), [
    ((LINK,), LINKS_READ, [to_jsonable(LINK)], True),
    ((), LINKS_READ, [], True),
    ((), NA, "N/A", True),
    ((), None, None, False),
])
def test_the_json_of_the_links_is_as_before(links, state, json, read):
    g = _gpu(nvlinks=links, nvlink_state=state)
    data = to_jsonable(g)
    assert data["nvlinks"] == json and "nvlink_state" not in data
    assert list(data).index("nvlinks") < list(data).index("fabric_state")  # the field keeps its place
    assert g.nvlinks_read is read


def test_gpus_without_links_have_no_nvlink_peers():
    a = _gpu(nvlinks=(LINK,), nvlink_state=LINKS_READ)
    b = _gpu("0000:19:00.0", nvlinks=(LINK,), nvlink_state=LINKS_READ)
    assert nvlink_peers(a, b) == 1
    assert nvlink_peers(a, _gpu("0000:19:00.0", nvlink_state=NA)) == 0
    assert nvlink_peers(a, _gpu("0000:19:00.0")) == 0


def test_the_gpu_panel_says_what_no_link_means():
    from nodeconsole.screens.widgets.gpu_text import nvlink_text

    assert nvlink_text(_gpu(nvlink_state=NA)) == "N/A"
    assert nvlink_text(_gpu()) == "-"
    assert nvlink_text(_gpu(nvlink_state=LINKS_READ)) == "none"
    assert nvlink_text(_gpu(nvlinks=(LINK,), nvlink_state=LINKS_READ)).startswith("1/1 active v4")
