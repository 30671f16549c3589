"""Rendered screens never depend on the pci.ids database of the machine running the tests.

Each screen is rendered with the machine's default database missing, then present as a full database
that names every device differently (and, where this machine has one installed, its real pci.ids): the
pictures must be identical, because the tests pass their database through the seam."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.console import pciids
from nodeconsole.screens.app import NodeConsoleApp
from tests.screens.conftest import FrozenCollector, make_frozen_seams

SYSTEM_IDS = Path("/usr/share/misc/pci.ids")


def _decoy_database(path: Path) -> Path:
    """A complete-looking pci.ids whose names all differ from the built-in table's."""
    lines = ["# decoy pci.ids: every name differs from the built-in table"]
    by_vendor: dict[int, list[tuple[int, str]]] = {}
    for (vendor, device), name in pciids.DEVICES.items():
        by_vendor.setdefault(vendor, []).append((device, name))
    for vendor, name in sorted(pciids.VENDORS.items()):
        lines.append(f"{vendor:04x}  DECOY {name}")
        lines += [f"\t{device:04x}  DECOY {dname}" for device, dname in sorted(by_vendor.get(vendor, []))]
    for base, (name, subs) in sorted(pciids.CLASSES.items()):
        lines.append(f"C {base:02x}  DECOY {name}")
        lines += [f"\t{sub:02x}  DECOY {sname}" for sub, sname in sorted(subs.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


async def _screens(seams) -> list[str]:
    app = NodeConsoleApp(seams, interval=3600, collector=FrozenCollector(seams))
    pictures = []
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.polls >= 1:
                break
        for key in "123456":
            await pilot.press(key)
            pictures.append(await _settled(pilot, app))
    return pictures


async def _settled(pilot, app, tries: int = 50) -> str:
    """The screen once two looks 0.1 s apart agree (a loaded machine draws a new screen late)."""
    last = None
    for _ in range(tries):
        await pilot.pause(0.1)
        shot = app.export_screenshot()
        if shot == last:
            return shot
        last = shot
    return last


async def test_screens_identical_with_and_without_machine_pci_ids(tmp_path, monkeypatch):
    monkeypatch.delenv(pciids.ENV, raising=False)  # let the machine's default database be consulted
    decoy = _decoy_database(tmp_path / "pci.ids")
    assert pciids.PciIds((decoy,)).vendor_name(0x10DE).startswith("DECOY")  # the decoy would show

    variants = {"none": (str(tmp_path / "absent" / "pci.ids"),), "decoy": (str(decoy),)}
    if SYSTEM_IDS.exists():
        variants["installed"] = (str(SYSTEM_IDS),)
    rendered = {}
    for label, paths in variants.items():
        monkeypatch.setattr(pciids, "DEFAULT_PATHS", paths)
        assert pciids.default_ids().paths == tuple(Path(p) for p in paths)
        rendered[label] = await _screens(make_frozen_seams(tmp_path / "demo"))
    assert "DECOY" not in "".join(rendered["decoy"])
    for label, pictures in rendered.items():
        for key, (got, want) in enumerate(zip(pictures, rendered["none"]), start=1):
            assert got == want, f"screen {key} differs with the {label} pci.ids"


@pytest.mark.parametrize("env", ["", None])
def test_default_database_follows_the_environment(env, tmp_path, monkeypatch):
    decoy = _decoy_database(tmp_path / "pci.ids")
    monkeypatch.setattr(pciids, "DEFAULT_PATHS", (str(decoy),))
    if env is None:
        monkeypatch.delenv(pciids.ENV, raising=False)
        assert pciids.default_ids().vendor_name(0x10DE) == "DECOY NVIDIA Corporation"
    else:
        monkeypatch.setenv(pciids.ENV, env)  # set but empty: the built-in table only
        assert pciids.default_ids().vendor_name(0x10DE) == "NVIDIA Corporation"
