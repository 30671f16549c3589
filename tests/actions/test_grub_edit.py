"""GRUB's kernel command line is edited as the shell reads /etc/default/grub (issue 28, item 8): each
case is planned and applied through `doctor --fix`, the result sourced in bash (it must run without an
error and give the command line asked for, every other GRUB_* variable unchanged), then undone byte for
byte. What cannot be edited safely is refused with the reason, nothing changed."""
from __future__ import annotations

from pathlib import Path

import pytest

from nodeconsole.actions.session import ActionSession, DoctorFix
from nodeconsole.console.demo.commands import DemoCommands
from nodeconsole.console.doctor import bootloader as bl
from nodeconsole.console.root import Root
from tests.actions.test_doctor_fixes import _apply, _undo, make_host, make_tree, tree_bytes
from tests.grub_bash import source_grub

HEAD = b"# If you change this file, run update-grub\n# \xe9t\xe9 (Latin-1)\nGRUB_DEFAULT=0\n"


def _host(tmp_path: Path, grub: bytes, snippets: dict[str, bytes] | None = None):
    root = tmp_path / "root"
    make_tree(root)
    (root / bl.GRUB_DEFAULT).write_bytes(grub)
    for name, data in (snippets or {}).items():
        (root / "etc/default/grub.d").mkdir(parents=True, exist_ok=True)
        (root / "etc/default/grub.d" / name).write_bytes(data)
    DemoCommands(Root(root)).run(["update-grub"])  # grub.cfg as the generator writes it (when it can)
    return root, make_host(root)


def _sourced(root: Path):
    return source_grub(root / bl.GRUB_DEFAULT, root / "etc/default/grub.d")


def _fix_and_undo(tmp_path: Path, grub: bytes, fix: str, want: list[str], snippets=None) -> bytes:
    """Apply the fix, check the sourced result, undo it; the new /etc/default/grub."""
    root, host = _host(tmp_path, grub, snippets)
    words_before, others_before, err = _sourced(root)
    assert err == b"", err  # the case itself is valid sh
    before = tree_bytes(root)
    result = _apply(host, ActionSession(host).plan(DoctorFix((fix,))))
    words, others, err = _sourced(root)
    assert err == b"", err
    assert words == want
    assert others == others_before
    new = (root / bl.GRUB_DEFAULT).read_bytes()
    _undo(host, result.record_id)
    assert tree_bytes(root) == before  # byte for byte, grub.cfg included
    return new


def test_a_line_continuation_inside_the_value(tmp_path):
    _fix_and_undo(tmp_path, HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet \\\nsplash"\nGRUB_CMDLINE_LINUX=""\n',
                  "iommu-pt", ["quiet", "splash", "iommu=pt"])


def test_escaped_quotes_keep_their_backslashes(tmp_path):
    new = _fix_and_undo(tmp_path, HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet acpi_osi=\\"Windows 2015\\""\n',
                        "iommu-pt", ["quiet", 'acpi_osi="Windows 2015"', "iommu=pt"])
    assert b'GRUB_CMDLINE_LINUX_DEFAULT="quiet acpi_osi=\\"Windows 2015\\" iommu=pt"\n' in new


def test_an_assignment_after_a_semicolon_stays_outside_the_value(tmp_path):
    new = _fix_and_undo(tmp_path, HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet";GRUB_TIMEOUT=5\n',
                        "iommu-pt", ["quiet", "iommu=pt"])
    assert new == HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt";GRUB_TIMEOUT=5\n'


def test_a_trailing_comment_and_latin1_bytes_are_kept(tmp_path):
    new = _fix_and_undo(tmp_path, HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet" # d\xe9faut\r\n',
                        "iommu-pt", ["quiet", "iommu=pt"])
    assert new == HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt" # d\xe9faut\r\n'


def test_a_single_quoted_dollar_stays_literal(tmp_path):
    new = _fix_and_undo(tmp_path, HEAD + b"GRUB_CMDLINE_LINUX_DEFAULT='quiet $HOME'\n",
                        "iommu-pt", ["quiet", "$HOME", "iommu=pt"])
    assert b'"quiet \\$HOME iommu=pt"' in new


def test_the_last_assignment_counts_even_in_a_grub_d_snippet(tmp_path):
    snippet = b'# cloud image\nGRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT console=ttyS0"\n'
    grub = HEAD + b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="intel_iommu=off"\n'
    root, host = _host(tmp_path, grub, {"50-cloud.cfg": snippet, "10-a.cfg": b"GRUB_TIMEOUT=1\n"})
    plan = ActionSession(host).plan(DoctorFix(("iommu",)))
    assert plan.ops()[0]["paths"] == ["etc/default/grub", "etc/default/grub.d/10-a.cfg",
                                      "etc/default/grub.d/50-cloud.cfg"]
    before = tree_bytes(root)
    result = _apply(host, plan)
    words, _, err = _sourced(root)
    assert err == b"" and words == ["quiet", "console=ttyS0", "intel_iommu=on"]  # the conflicting off replaced
    assert (root / bl.GRUB_DEFAULT).read_bytes() == grub.replace(b'"intel_iommu=off"', b'""')
    assert (root / "etc/default/grub.d/50-cloud.cfg").read_bytes() == (
        b'# cloud image\nGRUB_CMDLINE_LINUX_DEFAULT="quiet console=ttyS0 intel_iommu=on"\n')
    _undo(host, result.record_id)
    assert tree_bytes(root) == before


@pytest.mark.parametrize("grub, why", [
    (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nif [ -e /x ]; then\n  GRUB_CMDLINE_LINUX_DEFAULT="quiet nomodeset"\nfi\n',
     "inside a conditional or compound command (/etc/default/grub line 6)"),
    (b'GRUB_CMDLINE_LINUX_DEFAULT="$(cat /etc/cmdline)"\n', "set by command substitution"),
    (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet ${EXTRA:-splash}"\n', "expansion with an operator"),
    (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet $EXTRA"\n', "EXTRA is never set"),
    (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_SAVED="$GRUB_CMDLINE_LINUX_DEFAULT"\n', "used after the line"),
    (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n[ -e /x ] && GRUB_CMDLINE_LINUX_DEFAULT=""\n', "conditional"),
    (b'GRUB_CMDLINE_LINUX_DEFAULT="quiet\n', "unterminated double quote"),
    (b'. /etc/default/other\n', "`.`"),
])
def test_what_cannot_be_edited_safely_is_refused(tmp_path, grub, why):
    root, host = _host(tmp_path, HEAD + grub)
    before = tree_bytes(root)
    plan = ActionSession(host).plan(DoctorFix(("iommu-pt",)))
    assert not plan.ok and not plan.steps
    text = "\n".join(plan.lines())
    assert "can be edited safely" in text and why in text, text
    assert tree_bytes(root) == before


# -- issue 28, item 10: the doctor reads what the shell reads ---------------------------------------

def test_doctor_sees_grub_cmdline_linux_and_replaces_a_conflicting_value(tmp_path, monkeypatch):
    from nodeconsole.actions.progress import DONE
    from nodeconsole.console.seams import reboot_demo, reset_demo
    from tests.actions.test_doctor_fix_demo import _doctor

    monkeypatch.setenv("NODECONSOLE_STATE_DIR", str(tmp_path / "demo"))
    state = reset_demo(bare=True)
    grub = state / "root" / bl.GRUB_DEFAULT
    text = grub.read_bytes()
    assert b'GRUB_CMDLINE_LINUX=""' in text
    grub.write_bytes(text.replace(b'GRUB_CMDLINE_LINUX=""',
                                  b'GRUB_CMDLINE_LINUX="pcie_acs_override=downstream,multifunction intel_iommu=off"'))
    reboot_demo()
    report, session = _doctor(state)
    iommu, acs = report.check("iommu"), report.check("acs-override")
    assert iommu.status == "fail" and acs.status == "warn"
    for check in (iommu, acs):
        assert check.fix is not None and check.fix.plannable
        assert "already in the boot loader's configuration" not in check.fix.summary, check.fix.summary
    result = session.apply(session.plan(DoctorFix(("iommu", "acs-override"))))
    assert result.status == DONE, result.message
    words, _, err = source_grub(grub, grub.parent / "grub.d")
    assert err == b"" and "intel_iommu=on" in words
    assert not any(w.startswith(("intel_iommu=off", "pcie_acs_override")) for w in words)
    reboot_demo()
    after, _ = _doctor(state)
    assert after.check("iommu").status == "pass" and after.check("acs-override").status == "pass"


def test_a_flag_there_with_another_value_is_reported_as_conflicting(tmp_path):
    from nodeconsole.console.doctor.checks_common import Context

    root, _ = _host(tmp_path, HEAD + b'GRUB_CMDLINE_LINUX="intel_iommu=off"\nGRUB_CMDLINE_LINUX_DEFAULT="intel_iommu=on"\n')
    ctx = Context.__new__(Context)
    ctx.__dict__.update(loader=bl.detect(Root(root)), next_cmdline=bl.loader_cmdline(Root(root), bl.detect(Root(root)))
                        .split())
    assert ctx.next_cmdline == ["intel_iommu=off", "intel_iommu=on"]
    fix = ctx.cmdline_fix("turn the IOMMU on", ["intel_iommu=on"], [])
    assert "already" not in fix.summary and "has intel_iommu=off: the fix replaces it" in fix.summary
    assert fix.plannable
