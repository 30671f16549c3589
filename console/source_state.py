"""A source's state as a small immutable type: what the collector's guard says of each source it reads
(console/collector.py) and the snapshot's `sources` hold."""
from __future__ import annotations


class SourceState(str):
    """A source's state: "ok", "pending" (not read yet: the console's first, sysfs-only frame) or
    "unavailable: reason". Immutable; the text is the state as the JSON and the screens write it, and it
    is read through `ok`, `pending`, `lost` and `reason`."""
    __slots__ = ()
    UNAVAILABLE = "unavailable: "

    @classmethod
    def unavailable(cls, reason: str) -> SourceState:
        return cls(cls.UNAVAILABLE + reason)

    @property
    def ok(self) -> bool:
        return self == "ok"

    @property
    def pending(self) -> bool:
        return self == "pending"

    @property
    def lost(self) -> bool:
        """Neither ok nor pending: the source did not answer."""
        return self not in ("ok", "pending")

    @property
    def reason(self) -> str:
        """Why the source did not answer ("" when it did, or is pending)."""
        return self.removeprefix(self.UNAVAILABLE) if self.lost else ""


SOURCE_OK = SourceState("ok")
SOURCE_PENDING = SourceState("pending")
SOURCE_NAMES = ("sysfs", "nvml", "libvirt", "psutil")
