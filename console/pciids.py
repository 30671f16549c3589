"""Human names for PCI vendors, devices and classes.

The pci.ids database of the machine running the console (not of a captured root: names describe the
IDs, whoever owns the tree) is searched when a name is first asked for, and the names found are kept.
Without it, or for IDs an old database lacks, a built-in table covers the vendors a GPU host usually
holds and every PCI base class with its common subclasses (names as pci.ids spells them).
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

DEFAULT_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids",
                 "/usr/local/share/pci.ids")
# Overrides the search: a colon-separated list of files to try; set but empty means the built-in table.
ENV = "NODECONSOLE_PCI_IDS"


def configured_paths() -> tuple[str, ...]:
    """The files the process-wide database is read from: $NODECONSOLE_PCI_IDS, else DEFAULT_PATHS."""
    env = os.environ.get(ENV)
    if env is None:
        return DEFAULT_PATHS
    return tuple(p for p in env.split(":") if p)

VENDORS: dict[int, str] = {
    0x1000: "Broadcom / LSI", 0x1002: "Advanced Micro Devices, Inc. [AMD/ATI]",
    0x1022: "Advanced Micro Devices, Inc. [AMD]", 0x102B: "Matrox Electronics Systems Ltd.",
    0x1077: "QLogic Corp.", 0x10B5: "PLX Technology, Inc.", 0x10DE: "NVIDIA Corporation",
    0x10EC: "Realtek Semiconductor Co., Ltd.", 0x1137: "Cisco Systems Inc", 0x1179: "Toshiba Corporation",
    0x1344: "Micron Technology Inc", 0x13B5: "ARM", 0x1425: "Chelsio Communications Inc",
    0x144D: "Samsung Electronics Co Ltd", 0x14E4: "Broadcom Inc. and subsidiaries", 0x15AD: "VMware",
    0x15B3: "Mellanox Technologies", 0x15B7: "Sandisk Corp", 0x177D: "Cavium, Inc.",
    0x1912: "Renesas Technology Corp.", 0x1924: "Solarflare Communications", 0x19A2: "Emulex Corporation",
    0x19E5: "Huawei Technologies Co., Ltd.", 0x1A03: "ASPEED Technology, Inc.", 0x1AF4: "Red Hat, Inc.",
    0x1B21: "ASMedia Technology Inc.", 0x1B36: "Red Hat, Inc.", 0x1B4B: "Marvell Technology Group Ltd.",
    0x1BB1: "Seagate Technology PLC", 0x1C5C: "SK hynix", 0x1D0F: "Amazon.com, Inc.",
    0x1D6A: "Aquantia Corp.", 0x1DD8: "AMD Pensando Systems", 0x1DEF: "Ampere Computing, LLC",
    0x1E0F: "KIOXIA Corporation", 0x5143: "Qualcomm Inc", 0x8086: "Intel Corporation",
    0x8088: "Beijing Wangxun Technology Co., Ltd.", 0x9005: "Adaptec",
}

# Datacenter GPUs and their companions, as pci.ids names them (a few newer than old databases).
DEVICES: dict[tuple[int, int], str] = {
    (0x10DE, 0x1DB1): "GV100GL [Tesla V100 SXM2 16GB]", (0x10DE, 0x1DB4): "GV100GL [Tesla V100 PCIe 16GB]",
    (0x10DE, 0x1DB5): "GV100GL [Tesla V100 SXM2 32GB]", (0x10DE, 0x1DB6): "GV100GL [Tesla V100 PCIe 32GB]",
    (0x10DE, 0x1EB8): "TU104GL [Tesla T4]", (0x10DE, 0x20B0): "GA100 [A100 SXM4 40GB]",
    (0x10DE, 0x20B2): "GA100 [A100 SXM4 80GB]", (0x10DE, 0x20B5): "GA100 [A100 PCIe 80GB]",
    (0x10DE, 0x20F1): "GA100 [A100 PCIe 40GB]", (0x10DE, 0x20B7): "GA100GL [A30 PCIe]",
    (0x10DE, 0x2235): "GA102GL [A40]", (0x10DE, 0x2236): "GA102GL [A10]", (0x10DE, 0x25B6): "GA107GL [A2 / A16]",
    (0x10DE, 0x2321): "GH100 [H100 NVL]", (0x10DE, 0x2330): "GH100 [H100 SXM5 80GB]",
    (0x10DE, 0x2331): "GH100 [H100 PCIe]", (0x10DE, 0x2335): "GH100 [H200 SXM 141GB]",
    (0x10DE, 0x26B5): "AD102GL [L40]", (0x10DE, 0x26B9): "AD102GL [L40S]", (0x10DE, 0x27B8): "AD104GL [L4]",
    (0x10DE, 0x1AF1): "GA100 [A100 NVSwitch]", (0x10DE, 0x22A3): "GH100 [H100 NVSwitch]",
    (0x10DE, 0x10F8): "TU104 HD Audio Controller", (0x10DE, 0x1AEF): "GA102 High Definition Audio Controller",
    (0x15B3, 0x101B): "MT28908 Family [ConnectX-6]", (0x15B3, 0x101D): "MT2892 Family [ConnectX-6 Dx]",
    (0x15B3, 0x1021): "MT2910 Family [ConnectX-7]", (0x15B3, 0xA2DC): "MT43244 BlueField-3 integrated ConnectX-7",
    (0x1A03, 0x2000): "ASPEED Graphics Family",
}

# base class → (name, {subclass: name})
CLASSES: dict[int, tuple[str, dict[int, str]]] = {
    0x00: ("Unclassified device", {0x00: "Non-VGA unclassified device", 0x01: "VGA compatible unclassified device",
                                   0x05: "Image coprocessor"}),
    0x01: ("Mass storage controller", {
        0x00: "SCSI storage controller", 0x01: "IDE interface", 0x02: "Floppy disk controller",
        0x03: "IPI bus controller", 0x04: "RAID bus controller", 0x05: "ATA controller", 0x06: "SATA controller",
        0x07: "Serial Attached SCSI controller", 0x08: "Non-Volatile memory controller",
        0x09: "Universal Flash Storage controller", 0x80: "Mass storage controller"}),
    0x02: ("Network controller", {
        0x00: "Ethernet controller", 0x01: "Token ring network controller", 0x02: "FDDI network controller",
        0x03: "ATM network controller", 0x04: "ISDN controller", 0x05: "WorldFip controller",
        0x06: "PICMG controller", 0x07: "Infiniband controller", 0x08: "Fabric controller",
        0x80: "Network controller"}),
    0x03: ("Display controller", {0x00: "VGA compatible controller", 0x01: "XGA compatible controller",
                                  0x02: "3D controller", 0x80: "Display controller"}),
    0x04: ("Multimedia controller", {0x00: "Multimedia video controller", 0x01: "Multimedia audio controller",
                                     0x02: "Computer telephony device", 0x03: "Audio device",
                                     0x80: "Multimedia controller"}),
    0x05: ("Memory controller", {0x00: "RAM memory", 0x01: "FLASH memory", 0x02: "CXL", 0x80: "Memory controller"}),
    0x06: ("Bridge", {
        0x00: "Host bridge", 0x01: "ISA bridge", 0x02: "EISA bridge", 0x03: "MicroChannel bridge",
        0x04: "PCI bridge", 0x05: "PCMCIA bridge", 0x06: "NuBus bridge", 0x07: "CardBus bridge",
        0x08: "RACEway bridge", 0x09: "Semi-transparent PCI-to-PCI bridge",
        0x0A: "InfiniBand to PCI host bridge", 0x80: "Bridge"}),
    0x07: ("Communication controller", {
        0x00: "Serial controller", 0x01: "Parallel controller", 0x02: "Multiport serial controller",
        0x03: "Modem", 0x04: "GPIB controller", 0x05: "Smard Card controller", 0x80: "Communication controller"}),
    0x08: ("Generic system peripheral", {
        0x00: "PIC", 0x01: "DMA controller", 0x02: "Timer", 0x03: "RTC", 0x04: "PCI Hot-plug controller",
        0x05: "SD Host controller", 0x06: "IOMMU", 0x80: "System peripheral", 0x99: "Timing Card"}),
    0x09: ("Input device controller", {
        0x00: "Keyboard controller", 0x01: "Digitizer Pen", 0x02: "Mouse controller", 0x03: "Scanner controller",
        0x04: "Gameport controller", 0x80: "Input device controller"}),
    0x0A: ("Docking station", {0x00: "Generic Docking Station", 0x80: "Docking Station"}),
    0x0B: ("Processor", {0x00: "386", 0x01: "486", 0x02: "Pentium", 0x10: "Alpha", 0x20: "Power PC",
                         0x30: "MIPS", 0x40: "Co-processor"}),
    0x0C: ("Serial bus controller", {
        0x00: "FireWire (IEEE 1394)", 0x01: "ACCESS Bus", 0x02: "SSA", 0x03: "USB controller",
        0x04: "Fibre Channel", 0x05: "SMBus", 0x06: "InfiniBand", 0x07: "IPMI Interface",
        0x08: "SERCOS interface", 0x09: "CANBUS", 0x80: "Serial bus controller"}),
    0x0D: ("Wireless controller", {
        0x00: "IRDA controller", 0x01: "Consumer IR controller", 0x10: "RF controller", 0x11: "Bluetooth",
        0x12: "Broadband", 0x20: "802.1a controller", 0x21: "802.1b controller", 0x80: "Wireless controller"}),
    0x0E: ("Intelligent controller", {0x00: "I2O"}),
    0x0F: ("Satellite communications controller", {
        0x01: "Satellite TV controller", 0x02: "Satellite audio communication controller",
        0x03: "Satellite voice communication controller", 0x04: "Satellite data communication controller"}),
    0x10: ("Encryption controller", {0x00: "Network and computing encryption device",
                                     0x10: "Entertainment encryption device", 0x80: "Encryption controller"}),
    0x11: ("Signal processing controller", {
        0x00: "DPIO module", 0x01: "Performance counters", 0x10: "Communication synchronizer",
        0x20: "Signal processing management", 0x80: "Signal processing controller"}),
    0x12: ("Processing accelerators", {0x00: "Processing accelerators",
                                       0x01: "SNIA Smart Data Accelerator Interface (SDXI) controller"}),
    0x13: ("Non-Essential Instrumentation", {}),
    0x40: ("Coprocessor", {}),
    0xFF: ("Unassigned class", {}),
}


_MAX_FILE = 64 << 20  # pci.ids is ~1.3 MB; a larger file is read this far


class _View:
    """The file during one lookup, read (never mapped: a file truncated while mapped kills the process
    with SIGBUS): whole only when a vendor is first looked for or the classes are, else one vendor's
    byte range."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = fd, min(size, _MAX_FILE)
        self._whole: bytes | None = None

    def whole(self) -> bytes:
        if self._whole is None:
            self._whole = self.part(0, self.size)
        return self._whole

    def part(self, start: int, end: int) -> bytes:
        chunks, at = [], start
        while at < end:
            chunk = os.pread(self.fd, end - at, at)
            if not chunk:  # the file got shorter: what there is
                break
            chunks.append(chunk)
            at += len(chunk)
        return b"".join(chunks)


_BLOCK_END = re.compile(rb"\n[^\t#\r\n]")  # the next top-level line: another vendor, a class, a section


class PciIds:
    """One pci.ids database. `paths` are tried in order; none readable → built-in names only.

    Nothing of the file (~1.3 MB, ~17,000 devices) is parsed or held ahead: each vendor and device is
    looked up in the file when first asked for (the whole file read once per vendor, then only that
    vendor's lines) and only the names asked for are kept (a host has a few dozen); the classes section
    (a few hundred lines at the end) is parsed on the first class asked for. A whole-file index took
    ~7 ms and held ~0.6 MiB for the console's lifetime."""

    def __init__(self, paths: tuple[str | os.PathLike[str], ...] | None = DEFAULT_PATHS) -> None:
        self.paths = tuple(Path(p) for p in (paths or ()))
        self._lock = threading.Lock()
        self._loaded = False
        self.source: Path | None = None  # the file actually read
        self._vendors: dict[int, str] = {}  # the vendors asked for ("" when the file lacks one)
        self._devices: dict[tuple[int, int], str] = {}
        self._blocks: dict[int, tuple[int, int]] = {}  # vendor → its lines' byte range in the file
        self._identity: tuple[int, int, int] | None = None  # (inode, size, mtime) of the file read
        self._classes: dict[int, str] | None = None  # (base << 8 | sub) and (base << 16 | sub << 8 | progif) → name

    def _load(self) -> None:
        """Find the file (the first of `paths` that can be opened); nothing of it is read yet."""
        if self._loaded:  # the common case, without taking the lock
            return
        with self._lock:
            if self._loaded:
                return
            for path in self.paths:
                try:
                    with open(path, "rb") as f:
                        st = os.fstat(f.fileno())
                except OSError:
                    continue
                self._identity = (st.st_ino, st.st_size, st.st_mtime_ns)
                self.source = path
                break
            self._loaded = True

    def _search(self, find: Callable[[_View], object]) -> object:
        """Run `find` over the file (under the lock). A file rewritten since it was first opened
        (update-pciids, a package upgrade) drops every name found in the old one."""
        if self.source is None:
            return None
        try:
            with open(self.source, "rb") as f:
                st = os.fstat(f.fileno())
                identity = (st.st_ino, st.st_size, st.st_mtime_ns)
                if identity != self._identity:
                    self._identity = identity
                    self._vendors.clear()
                    self._devices.clear()
                    self._blocks.clear()
                    self._classes = None
                return find(_View(f.fileno(), st.st_size))
        except (OSError, ValueError):
            return None

    @staticmethod
    def _line_after(data: bytes, key: bytes, start: int = 0, end: int | None = None,
                    first_line: bool = False) -> int:
        """Where the text after `key` ("\n" + an id) starts on a line of its own, -1 when not there: the id
        must be followed by a space or a tab (1234 is not 12345's line). With `first_line`, the data's
        first line (no newline before it) is looked at too."""
        stop = len(data) if end is None else end
        pos = start
        while True:
            at = data.find(key, pos, stop)
            if at < 0:
                if first_line and data[:len(key) - 1] == key[1:] and data[len(key) - 1:len(key)] in (b" ", b"\t"):
                    return len(key) - 1
                return -1
            after = at + len(key)
            if data[after:after + 1] in (b" ", b"\t"):
                return after
            pos = after

    @staticmethod
    def _rest_of_line(data: bytes, at: int) -> str:
        stop = data.find(b"\n", at)
        return data[at:stop if stop >= 0 else len(data)].strip(b" \t\r").decode("utf-8", "replace")

    def _block(self, view: _View, vendor: int) -> tuple[int, int] | None:
        """Where a vendor's name starts in the file and where its device lines end (kept: a host's
        devices are looked up in the lines of a few vendors, each found once)."""
        block = self._blocks.get(vendor)
        if block is None:
            data = view.whole()
            for form in (b"\n%04x", b"\n%04X"):
                at = self._line_after(data, form % vendor, first_line=True)
                if at >= 0:
                    m = _BLOCK_END.search(data, at)
                    block = self._blocks[vendor] = (at, m.start() if m else len(data))
                    break
        return block

    def _find_vendor(self, vendor: int) -> tuple[str, int] | None:
        def find(view: _View) -> tuple[str, int] | None:
            block = self._block(view, vendor)
            return (self._rest_of_line(view.part(*block), 0), block[0]) if block else None

        found = self._search(find)
        return found if isinstance(found, tuple) else None

    def _find_device(self, vendor: int, device: int) -> str:
        """The name of one device, looked up in its vendor's lines of the file ("" when not there)."""
        def find(view: _View) -> str:
            block = self._block(view, vendor)
            if block is None:
                return ""
            lines = view.part(*block)  # the vendor's name, then its device lines
            for form in (b"\n\t%04x", b"\n\t%04X"):
                at = self._line_after(lines, form % device)
                if at >= 0:
                    return self._rest_of_line(lines, at)
            return ""

        found = self._search(find)
        return found if isinstance(found, str) else ""

    def _load_classes(self) -> dict[int, str]:
        def find(view: _View) -> dict[int, str]:
            data = view.whole()
            classes: dict[int, str] = {}
            at = data.find(b"\nC ")
            while at >= 0:
                head_end = data.find(b"\n", at + 1)
                head_end = head_end if head_end >= 0 else len(data)
                m = _BLOCK_END.search(data, head_end)
                end = m.start() if m else len(data)
                self._parse_classes(data[at + 1:head_end].decode("utf-8", "replace"),
                                    data[head_end:end].decode("utf-8", "replace"), classes)
                at = end if data[end + 1:end + 3] == b"C " else -1
            return classes

        found = self._search(find)
        return found if isinstance(found, dict) else {}

    @staticmethod
    def _parse_classes(head: str, body: str, classes: dict[int, str]) -> None:
        try:
            klass = int(head[2:4], 16)
        except ValueError:
            return
        classes[klass] = head[4:].strip()
        sub = None
        for line in body.splitlines():
            if not line or line[0] == "#":
                continue
            if line.startswith("\t\t"):
                if sub is not None:
                    try:
                        classes[(klass << 16) | (sub << 8) | int(line[2:4], 16)] = line[4:].strip()
                    except ValueError:
                        pass
                continue
            try:
                sub = int(line[1:3], 16)
            except ValueError:
                sub = None
                continue
            classes[(klass << 8) | sub] = line[3:].strip()

    # -- lookups --
    def vendor_name(self, vendor_id: int) -> str:
        self._load()
        name = self._vendors.get(vendor_id)
        if name is None:  # asked for the first time (kept: a vendor's name does not change)
            with self._lock:
                found = self._find_vendor(vendor_id)
                name = self._vendors[vendor_id] = found[0] if found else ""
        return name or VENDORS.get(vendor_id, "")

    def device_name(self, vendor_id: int, device_id: int) -> str:
        self._load()
        key = (vendor_id, device_id)
        name = self._devices.get(key)
        if name is None:  # asked for the first time: only the devices a host has are kept
            with self._lock:
                name = self._find_device(vendor_id, device_id)
                self._devices[key] = name
        return name or DEVICES.get(key, "")

    def class_name(self, class_id: int) -> str:
        """Name of a 24-bit class code: the subclass name ("Audio device"), else the base class name."""
        self._load()
        classes = self._classes
        if classes is None:
            with self._lock:
                classes = self._classes = self._load_classes()
        base, sub = (class_id >> 16) & 0xFF, (class_id >> 8) & 0xFF
        name = classes.get((base << 8) | sub)
        if name:
            return name
        builtin = CLASSES.get(base)
        if builtin and sub in builtin[1]:
            return builtin[1][sub]
        return classes.get(base) or (builtin[0] if builtin else "")


_default: PciIds | None = None
_default_lock = threading.Lock()


def default_ids() -> PciIds:
    """The process-wide database (the machine's pci.ids, or $NODECONSOLE_PCI_IDS), created on first use
    and created again when the configured paths change."""
    global _default
    paths = configured_paths()
    with _default_lock:
        if _default is None or _default.paths != tuple(Path(p) for p in paths):
            _default = PciIds(paths)
        return _default

