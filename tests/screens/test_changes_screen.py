"""The Changes screen (8): the audit log newest first; `u` undoes and `r` redoes the selected change
through the plan modal, and a passthrough made in the console round-trips exactly: undone, the GPU is
back on nvidia and every VM definition byte for byte; redone, it is on vfio-pci in the VM's config again."""
from __future__ import annotations

from textual.widgets import Input, Static

from nodeconsole.actions.session import Passthrough
from nodeconsole.console.audit_log import AuditRecord
from nodeconsole.screens.app import NodeConsoleApp
from nodeconsole.screens.changes import ChangesScreen, latest_redo, record_text, redo_target, undo_target
from nodeconsole.screens.messages import PlanChange
from nodeconsole.screens.modals.plan import PlanModal
from nodeconsole.screens.widgets.keyed_table import KeyedTable
from tests.screens.helpers import wait_until

GPU = "0000:9a:00.0"  # idle on nvidia; the shut-off VM train-c holds it in its config
VM = "build-1"  # shut off, no GPU


def _domain(xml: str, name: str) -> str:
    start = xml.index(f"<name>{name}</name>")
    return xml[start:xml.index("</domain>", start)]


def _rows(screen: ChangesScreen) -> list[tuple[str, ...]]:
    table = screen.query_one("#changes-table", KeyedTable)
    return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


async def _confirm(app, pilot, title: str) -> None:
    assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
    assert str(app.screen.query_one("#plan-title", Static).content).startswith(title)
    n = len(app.action_results)
    await pilot.click("#yes")
    assert await wait_until(pilot, lambda: len(app.action_results) == n + 1, tries=200)
    assert app.action_results[-1].ok, app.action_results[-1].message


async def test_undo_and_redo_a_console_passthrough_from_the_changes_screen(demo_seams):
    node = demo_seams.audit_dir / "libvirt.xml"
    before = node.read_bytes()
    app = NodeConsoleApp(demo_seams, interval=60)  # polls: at start and after each change
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: app.polls >= 1)
        app.post_message(PlanChange(Passthrough(GPU, vm=VM)))  # two VM configs with the GPU: its address is typed
        assert await wait_until(pilot, lambda: isinstance(app.screen, PlanModal), tries=200)
        app.screen.query_one("#plan-typed", Input).value = GPU
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: bool(app.action_results), tries=200)
        passthrough = app.action_results[0]
        assert passthrough.ok, passthrough.message
        assert "bus='0x9a'" in _domain(node.read_text(), VM)

        await pilot.press("8")
        screen = app.screen
        assert isinstance(screen, ChangesScreen)
        assert await wait_until(pilot, lambda: _rows(screen) and _rows(screen)[0][0] == passthrough.record_id)
        first = _rows(screen)[0]
        assert first[3:6] == ("passthrough", "applied", "") and VM in first[6]
        panel = str(screen.query_one("#changes-panel", Static).content)
        assert "virsh" in panel and f"nodeconsole undo {passthrough.record_id} --apply" in panel

        await pilot.press("u")
        await _confirm(app, pilot, f"Undo {passthrough.record_id}")
        assert await wait_until(pilot, lambda: app.snapshot.gpu(GPU).driver == "nvidia", tries=100)
        assert node.read_bytes() == before  # every VM definition, byte for byte
        undo = app.action_results[-1]
        assert await wait_until(pilot, lambda: _rows(screen)[0][0] == undo.record_id), (_rows(screen), undo)
        assert _rows(screen)[0][5] == "undo" and _rows(screen)[1][5] == "undone"

        # the cursor stays on the change it undid (now below its undo); r redoes it from there
        assert screen.query_one("#changes-table", KeyedTable).selected_key() == passthrough.record_id
        await pilot.press("r")
        await _confirm(app, pilot, f"Undo {undo.record_id}")
        assert await wait_until(pilot, lambda: app.snapshot.gpu(GPU).driver == "vfio-pci", tries=100)
        assert "bus='0x9a'" in _domain(node.read_text(), VM)
        assert await wait_until(pilot, lambda: _rows(screen)[0][5] == "redo")
        assert [r[5] for r in _rows(screen)[1:3]] == ["undo, redone", ""]  # the passthrough is in effect again


def _fields(rid: str, **kw) -> dict:
    return {"id": rid, "action": kw.pop("action", "passthrough"), "result": "applied", "undo": [{"kind": "x"}], **kw}


def _rec(rid: str, **kw) -> AuditRecord:
    return AuditRecord.from_dict(_fields(rid, **kw))


def _typed(records: list[dict]) -> tuple[list[AuditRecord], dict[str, AuditRecord]]:
    typed = [AuditRecord.from_dict(r) for r in records]
    return typed, {r.id: r for r in typed}


def test_undo_and_redo_targets_follow_the_history():
    o = _fields("1")  # undone by 2, then the redo 3 put the change back: in effect
    u = _fields("2", action="undo", undoes="1", undone_by="3")
    r = _fields("3", action="undo", undoes="2")
    records, by_id = _typed([o, u, r])
    for row in records:  # u from any row of the chain undoes the change itself; nothing to redo
        assert undo_target(row, by_id) == ("1", "")
        assert redo_target(row, by_id)[0] is None
    assert latest_redo(records) is None
    o["undone_by"] = "4"
    records, by_id = _typed([o, u, r, _fields("4", action="undo", undoes="1")])
    o_, u2 = by_id["1"], by_id["4"]
    assert redo_target(o_, by_id) == ("4", "") and latest_redo(records) == "4"
    assert undo_target(o_, by_id)[0] is None and "r redoes" in undo_target(o_, by_id)[1]
    text = record_text(u2, records, "")
    assert "undo of 1" in text and "r redoes it" in text and "nodeconsole undo 4 --apply" in text


def test_a_change_waiting_for_a_reboot_says_so_until_the_boot_changes():
    from nodeconsole.screens.changes import change_rows

    fix = _rec("20260101-000000-abcd", action="doctor fix", needs_reboot=True, boot_id="boot-1",
               when="2026-01-01T00:00:00+00:00", who={"user": "root"}, title="Fix iommu")
    (key, cells), = change_rows([fix], "boot-1")
    assert cells[1] == "01-01 00:00" and cells[2] == "root" and cells[5] == "reboot pending"
    assert change_rows([fix], "boot-2")[0][1][5] == ""
