"""Step kinds that change what the host does at its next boot: the kernel command line in the boot
loader's own configuration, and configuration files followed by the program that makes them count (an
initramfs rebuild). Both keep the exact old bytes of every file they edit in their inverse operation, so
the audit record holds them and undo restores each file byte for byte (and runs the program again).

- `boot_cmdline` {"loader", "paths", "add", "remove", "regenerate", "cfg"}: the words the detected boot
  loader (console/doctor/bootloader.py) puts on the kernel command line get `add` and lose `remove`:
  GRUB's GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT, where /etc/default/grub and its grub.d snippets
  (`paths`, all of them, in the order they are sourced) last set each, through a shell-aware edit
  (console/grub_config.py: refused when it cannot be made safely) then `update-grub`/`grub2-mkconfig -o CFG`,
  Proxmox's /etc/kernel/cmdline then `proxmox-boot-tool refresh`, systemd-boot's `options` lines of the
  running kernel's entries, or grubby's `--args`/`--remove-args` (the edit is the command). Its inverse
  has `restore` (the files' old bytes) instead of add/remove (for grubby also `undo_args`, the opposite
  command, run first); it writes them back and runs `regenerate` again.
- `config_file` {"files": [{"path", "content", "encoding"}], "run": [argv...], "title", "why",
  "needs_reboot"}: each file holds exactly `content` (None: absent), then each `run` argv runs once
  (e.g. `update-initramfs -u`). Its inverse holds the old contents and the same `run`.

Files are written through the root (never outside it), atomically, mode 0644, and never through a
symbolic link: a file that is a link is refused. Only known programs run (a hand-edited audit record must
not make undo run something else), as argv lists, never through a shell.
"""
from __future__ import annotations

import base64
import os
from typing import Any

from nodeconsole.actions.host import ActionHost
from nodeconsole.actions.host_steps import make_parents, missing_dirs, remove_dirs, target_path
from nodeconsole.actions.plan import Op, Step, StepError, step_kind
from nodeconsole.console.doctor import bootloader as bl
from nodeconsole.console.grub_config import GrubCmdline, edit_cmdline, grub_files
from nodeconsole.console.outfile import write_atomic
from nodeconsole.console.root import Root
from nodeconsole.console.shell_assign import ShellEditError, Source

LOADERS = ("grub", "proxmox", "systemd-boot", "grubby")
GRUB_CFGS = ("boot/grub/grub.cfg", "boot/grub2/grub.cfg")
# Programs a step may run after writing (argv exactly; the grub-mkconfig output is checked apart)
RUNS = (("update-initramfs", "-u"), ("dracut", "-f"), ("systemctl", "daemon-reload"),
        ("proxmox-boot-tool", "refresh"), ("update-grub",))
_MKCONFIG = ("grub-mkconfig", "grub2-mkconfig")
FILE_MODE = 0o644


# -- exact file contents --------------------------------------------------------------------------------

def rel_path(path: object) -> str:
    """A root-relative path from an operation, refusing anything that could lead out of the root."""
    if not isinstance(path, str) or not path.strip("/"):
        raise StepError(f"malformed path {path!r}")
    rel = path.strip("/")
    if ".." in rel.split("/"):
        raise StepError(f"refusing a path outside the root: /{rel}")
    return rel


def read_exact(root: Root, rel: str) -> bytes | None:
    """A file's bytes (None when absent). StepError when it is a symbolic link or not a readable regular
    file: the steps here never write through a link nor replace what they cannot read back."""
    where = root.resolve_parent(rel)
    if where is None:
        raise StepError(f"refusing /{rel}: it leads out of the root")
    if os.path.islink(where):
        raise StepError(f"/{rel} is a symbolic link: nodeconsole edits only regular files (edit it by hand)")
    if not os.path.lexists(where):
        return None
    data = root.read_bytes(rel)
    if data is None:
        raise StepError(f"/{rel} is not a readable regular file")
    return data


def encode(data: bytes | None) -> dict[str, Any]:
    """File content as JSON (for the audit record): text when it is UTF-8, else base64."""
    if data is None:
        return {"content": None}
    try:
        return {"content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"content": base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def decode(entry: dict[str, Any]) -> bytes | None:
    content = entry.get("content")
    if content is None:
        return None
    if not isinstance(content, str):
        raise StepError(f"malformed file content for /{entry.get('path')}")
    if entry.get("encoding") == "base64":
        return base64.b64decode(content.encode("ascii"), validate=True)
    if entry.get("encoding", "utf-8") != "utf-8":
        raise StepError(f"unknown encoding {entry.get('encoding')!r}")
    return content.encode("utf-8")


def write_exact(root: Root, rel: str, data: bytes | None, dirs: list[str] | None = None) -> None:
    """Make the file hold exactly `data` (None: remove it, then the empty `dirs`), through the one writer
    (console/outfile.write_atomic: atomic and durable, mode 0644, a link there refused)."""
    path = target_path(root, rel)
    if data is None:
        if os.path.lexists(path):
            os.unlink(path)
        remove_dirs(root, dirs or [])
        return
    created = make_parents(root, rel)
    try:
        write_atomic(path, data, FILE_MODE)
    except BaseException:
        remove_dirs(root, created)  # a failed write leaves the host as it was
        raise


def checked_run(argv: object) -> list[str]:
    """A program to run after writing, when it is one the steps may run."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise StepError(f"malformed command {argv!r}")
    if tuple(argv) in RUNS:
        return list(argv)
    if len(argv) == 3 and argv[0] in _MKCONFIG and argv[1] == "-o" and argv[2].lstrip("/") in GRUB_CFGS:
        return list(argv)
    raise StepError(f"refusing to run {' '.join(argv)!r}: not a boot configuration command")


def run_program(host: ActionHost, argv: list[str]) -> None:
    if not host.commands.which(argv[0]):
        raise StepError(f"{argv[0]} is not installed on this host: run `{' '.join(argv)}` there by hand")
    rc, out = host.commands.run(argv)
    if rc != 0:
        raise StepError(f"{' '.join(argv)} exited {rc}: {out}")


# -- config_file ----------------------------------------------------------------------------------------

def _files(op: Op) -> list[dict[str, Any]]:
    files = op.get("files")
    if not isinstance(files, list) or not files or not all(isinstance(f, dict) for f in files):
        raise StepError("malformed config_file operation (no files)")
    return [dict(f, path=rel_path(f.get("path"))) for f in files]


@step_kind("config_file")
def config_file_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when every file already holds its content."""
    root = host.root
    files = _files(op)
    want = {f["path"]: decode(f) for f in files}
    runs = [checked_run(a) for a in op.get("run") or []]
    old = {rel: read_exact(root, rel) for rel in want}
    if all(old[rel] == want[rel] for rel in want):
        return None
    inverse = {"kind": "config_file", "run": runs, "needs_reboot": bool(op.get("needs_reboot")),
               "title": f"Restore {', '.join('/' + r for r in want)} as they were",
               "why": "undo: the files get their old content back" + (
                   f" and {' '.join(runs[0])} runs again" if runs else ""),
               "files": [dict(encode(old[rel]), path=rel,
                              remove_dirs=missing_dirs(root, rel) if old[rel] is None else [])
                         for rel in want]}
    dirs = {f["path"]: [rel_path(d) for d in f.get("remove_dirs") or []] for f in files}

    def apply() -> None:
        for rel, data in want.items():
            if read_exact(root, rel) != data:
                write_exact(root, rel, data, dirs[rel])
        for argv in runs:
            run_program(host, argv)

    def verify() -> str | None:
        for rel, data in want.items():
            if read_exact(root, rel) != data:
                return f"/{rel} {'still exists' if data is None else 'does not hold the expected content'}"
        return None

    cmds = [f"rm /{rel}" if data is None else f"cat > /{rel} <<'EOF'  # content below"
            for rel, data in want.items() if old[rel] != data]
    cmds += [" ".join(a) for a in runs]
    detail = "\n".join(f"/{rel}:\n" + data.decode("utf-8", "replace").rstrip("\n")
                       for rel, data in want.items() if data is not None and old[rel] != data)
    title = str(op.get("title") or f"Write {', '.join('/' + r for r in want)}")
    step = Step(title, str(op.get("why") or "configuration for the next boot"), tuple(cmds), dict(op),
                inverse, apply, verify, detail=detail)
    step.needs_reboot = bool(op.get("needs_reboot"))
    return step


# -- boot_cmdline ---------------------------------------------------------------------------------------

def loader_words(kind: str, text: str) -> list[str]:
    """The command-line words one file of the boot loader's configuration holds (not GRUB: its words
    come from several files, grub_config.GrubCmdline)."""
    if kind in ("systemd-boot", "grubby"):
        return (bl.entry_options(text) or "").split()
    return text.split()


def edited(kind: str, text: str, add: list[str], remove: list[str]) -> str:
    """`text` (one file of the boot loader's configuration) with the command-line words edited; every
    other byte kept."""
    words = bl.edit_words(loader_words(kind, text), add, remove)
    if words == loader_words(kind, text):
        return text
    if kind in ("systemd-boot", "grubby"):
        return bl.set_entry_options(text, " ".join(words))
    end = text[len(text.rstrip("\r\n")):] or "\n"
    return " ".join(words) + end  # /etc/kernel/cmdline: one line


def _words_ok(words: list[str], add: list[str], remove: list[str]) -> bool:
    return (all(w in words for w in add)
            and not any(w == r or ("=" not in r and bl.flag_name(w) == r) for w in words for r in remove))


def _grub_cfg_words(root: Root, cfg: str | None) -> list[list[str]]:
    """The words of every `linux` line of the generated grub.cfg."""
    text = root.read(cfg) if cfg else None
    out = []
    for line in (text or "").splitlines():
        words = line.split()
        if words and words[0] in ("linux", "linuxefi", "linux16"):
            out.append(words[2:])
    return out


def _loader(op: Op, paths: list[str], regenerate: list[str]) -> bl.BootLoader:
    kind = op.get("loader")
    if kind not in LOADERS:
        raise StepError(f"unknown boot loader {kind!r}")
    if kind == "proxmox" and len(paths) != 1:
        raise StepError(f"malformed boot_cmdline operation: {kind} edits one file")
    config = None if kind == "grubby" else paths[0]
    return bl.BootLoader(kind, config, tuple(regenerate), entries=tuple(paths) if kind == "systemd-boot" else ())


def _grubby_argv(add: list[str], remove: list[str]) -> list[list[str]]:
    out = []
    if add:
        out.append(["grubby", "--update-kernel=ALL", f"--args={' '.join(add)}"])
    if remove:
        out.append(["grubby", "--update-kernel=ALL", f"--remove-args={' '.join(remove)}"])
    return out


def _word_list(value: object) -> list[str]:
    if not isinstance(value, list) or not all(
            isinstance(w, str) and w and w.split() == [w] and w.isascii() and w.isprintable() for w in value):
        raise StepError(f"malformed command-line words {value!r}")
    return list(value)


@step_kind("boot_cmdline")
def boot_cmdline_step(host: ActionHost, op: Op) -> Step | None:
    """See the module doc. None when the configuration already has the words (or the old bytes)."""
    paths = [rel_path(p) for p in op.get("paths") or []]
    if not paths:
        raise StepError("malformed boot_cmdline operation (no files)")
    regenerate = checked_run(op["regenerate"]) if op.get("regenerate") else []
    loader = _loader(op, paths, regenerate)
    if "restore" in op:
        return _restore_step(host, op, loader, regenerate)
    add, remove = _word_list(op.get("add") or []), _word_list(op.get("remove") or [])
    root = host.root
    old: dict[str, bytes] = {}
    for rel in paths:
        data = read_exact(root, rel)
        if data is None:
            raise StepError(f"/{rel} is gone: plan again")
        old[rel] = data
    texts = {rel: data.decode("latin-1") for rel, data in old.items()}  # one character per byte: exact
    if loader.kind == "grub":
        new = _grub_edit(root, paths, old, add, remove)
    else:
        new = {rel: edited(loader.kind, text, add, remove) for rel, text in texts.items()}
    if all(new[rel] == texts[rel] for rel in paths):
        return None
    keep = paths + [p for p in _grubby_extra(root) if loader.kind == "grubby" and p not in paths]
    inverse: Op = {"kind": "boot_cmdline", "loader": loader.kind, "paths": paths, "regenerate": regenerate,
                   "cfg": op.get("cfg"), "restore": [dict(encode(read_exact(root, p)), path=p) for p in keep]}
    if loader.kind == "grubby":
        inverse["undo_args"] = _opposite(loader.kind, texts, new)
    cfg = rel_path(op["cfg"]) if op.get("cfg") else None

    def apply() -> None:
        if loader.kind == "grubby":
            for argv in _grubby_argv(add, remove):
                run_program(host, argv)
            return
        for rel in paths:
            if new[rel] != texts[rel]:
                write_exact(root, rel, new[rel].encode("latin-1"))
        if regenerate:
            run_program(host, regenerate)

    def verify() -> str | None:
        for rel, words in _now_words(root, loader.kind, paths):
            if words is None or not _words_ok(words, add, remove):
                return f"/{rel} does not give the kernel {' '.join(add + ['-' + r for r in remove])}"
        if loader.kind == "grub" and cfg and not any(_words_ok(w, add, remove) for w in _grub_cfg_words(root, cfg)):
            return f"/{cfg} has no boot entry with the new command line ({' '.join(regenerate)} did not update it)"
        return None

    what = " ".join([f"+{w}" for w in add] + [f"-{w}" for w in remove])
    step = Step(f"Kernel command line ({loader.describe()}): {what}",
                "the kernel reads these flags only when it boots", loader.commands(add, remove), dict(op),
                inverse, apply, verify)
    step.needs_reboot = True
    return step


def _grub_edit(root: Root, paths: list[str], old: dict[str, bytes], add: list[str],
               remove: list[str]) -> dict[str, str]:
    """GRUB's files after the edit (console/grub_config.py), as Latin-1 text; StepError when the files are
    not the ones planned or the edit cannot be made safely."""
    now = grub_files(root)
    if paths != now:
        raise StepError(f"GRUB's configuration files changed since the plan ({', '.join('/' + p for p in now)}): "
                        "plan again")
    try:
        data = edit_cmdline([Source(f"/{rel}", old[rel]) for rel in paths], add, remove)
    except ShellEditError as e:
        raise StepError(f"{e}: set the kernel command line by hand") from None
    return {rel: d.decode("latin-1") for rel, d in zip(paths, data)}


def _now_words(root: Root, kind: str, paths: list[str]) -> list[tuple[str, list[str] | None]]:
    """(file, the command-line words it gives now) for the verification: GRUB's files give one list."""
    if kind == "grub":
        sources = [Source(f"/{rel}", root.read_bytes(rel) or b"") for rel in paths]
        return [(paths[0], GrubCmdline.read(sources).words)]
    return [(rel, loader_words(kind, (root.read_bytes(rel) or b"").decode("latin-1"))) for rel in paths]


def _opposite(kind: str, old: dict[str, str], new: dict[str, str]) -> dict[str, list[str]]:
    """The words an edit took away (to add back) and put in (to remove), over all files."""
    back: list[str] = []
    out: list[str] = []
    for rel in old:
        before, after = loader_words(kind, old[rel]), loader_words(kind, new[rel])
        back += [w for w in before if w not in after and w not in back]
        out += [w for w in after if w not in before and w not in out]
    return {"add": back, "remove": out}


def _grubby_extra(root: Root) -> list[str]:
    """Files grubby may rewrite beside the entries (kept so undo restores them too)."""
    return [p for p in (bl.GRUB_DEFAULT, "boot/grub2/grubenv") if root.exists(p)]


def _restore_step(host: ActionHost, op: Op, loader: bl.BootLoader, regenerate: list[str]) -> Step | None:
    """The inverse form of `boot_cmdline`: the configuration files get their recorded bytes back."""
    root = host.root
    entries = op["restore"]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise StepError("malformed boot_cmdline restore")
    want = {rel_path(e.get("path")): decode(e) for e in entries}
    now = {rel: read_exact(root, rel) for rel in want}
    if all(now[rel] == want[rel] for rel in want):
        return None
    undo_args = op.get("undo_args") or {}
    grubby = _grubby_argv(_word_list(undo_args.get("add") or []), _word_list(undo_args.get("remove") or [])) \
        if loader.kind == "grubby" else []
    inverse: Op = {"kind": "boot_cmdline", "loader": loader.kind, "paths": list(op["paths"]),
                   "regenerate": regenerate, "cfg": op.get("cfg"),
                   "restore": [dict(encode(now[rel]), path=rel) for rel in want]}

    def apply() -> None:
        for argv in grubby:  # grubby's own bookkeeping first; the bytes below make the files exact
            run_program(host, argv)
        for rel, data in want.items():
            if read_exact(root, rel) != data:
                write_exact(root, rel, data)
        if regenerate:
            run_program(host, regenerate)

    def verify() -> str | None:
        bad = [f"/{rel}" for rel, data in want.items() if read_exact(root, rel) != data]
        return f"{', '.join(bad)} not back to the recorded content" if bad else None

    files = ", ".join(f"/{rel}" for rel in want)
    cmds = tuple(" ".join(a) for a in grubby) + (f"restore {files} (recorded bytes)",) + (
        (" ".join(regenerate),) if regenerate else ())
    step = Step(f"Kernel command line ({loader.describe()}): restore {files}",
                "put the boot configuration back as it was", cmds, dict(op), inverse, apply, verify)
    step.needs_reboot = True
    return step
