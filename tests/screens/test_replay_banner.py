"""The console on a capture (`nodeconsole --replay FILE`): every screen says whose host it shows and when
it was captured, as plain text."""
from __future__ import annotations

from nodeconsole.console.capture.take import take_capture
from nodeconsole.console.seams import replay_host
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.base import Banner
from tests.screens.helpers import wait_until


async def test_every_screen_names_the_replayed_host_and_time(frozen_seams, tmp_path):
    capture = take_capture(frozen_seams)
    archive = tmp_path / "demo.tar.gz"
    archive.write_bytes(capture.data)
    expected = f"replay of gpu-node-01 captured at {capture.manifest['captured_at']} (read-only)"
    app = NodeConsoleApp(lambda: replay_host(archive), interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.sources.libvirt == "ok")
        for key in ("1", "4", "5"):
            await pilot.press(key)
            banner = app.screen.query_one(Banner)
            assert await wait_until(pilot, lambda b=banner: expected in str(getattr(b, "_shown", "")))
            assert banner.display
