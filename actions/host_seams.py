"""The write seams of an ActionHost (actions/runner.py), as protocols: what actions call on them.

Implementations satisfy them structurally (none inherits from these):
- `KernelWriter`: console/demo/kernel.py's `Kernel` (the real host, below a root) and `SimulatedKernel`
  (the demo host, which also changes its tree the way Linux would);
- `DomainStore`: actions/libvirt_edit.py's `LibvirtDomainConfig` (a libvirt connection) and
  `NodeFileDomainConfig` (the demo's libvirt test-driver node file), both through `DomainConfig`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class KernelWriter(Protocol):
    """Writes kernel attribute files (sysfs/procfs). An implementation may also offer
    `load_module(name)`; actions look it up with getattr and run `modprobe` otherwise."""

    def write(self, path: str, text: str) -> None:
        """One write() of `text` to the attribute at root-relative `path`, as `echo` does. A missing
        attribute is FileNotFoundError, never a new file."""
        ...


class DomainStore(Protocol):
    """The persistent configuration of a host's libvirt domains."""

    def names(self) -> list[str]: ...

    def xml(self, vm: str) -> str:
        """The domain's persistent (inactive) XML. DomainConfigError for an unknown domain."""
        ...

    def define(self, vm: str, xml: str) -> None:
        """Replace the domain's persistent XML with `xml`."""
        ...

    def add_hostdev(self, vm: str, address: str, managed: bool = True, index: int | None = None) -> None:
        """Add a PCI hostdev; `index` (its place among the <hostdev> elements) is a hint."""
        ...

    def remove_hostdev(self, vm: str, address: str) -> None: ...

    def edit(self, vm: str, change: Callable[[str], str]) -> None:
        """Define the domain again with `change(xml)` when that differs from its XML."""
        ...

    def edit_text(self, vm: str, change: Callable[[str], str | None]) -> bool:
        """Change the domain as stored, as text; False when there is no stored text to edit."""
        ...

    def pci_hostdevs(self, vm: str) -> set[str]:
        """PCI addresses of the domain's PCI hostdevs."""
        ...

    def hostdev_place(self, vm: str, address: str) -> tuple[int, bool] | None:
        """(index among the domain's <hostdev> elements, managed) of the PCI hostdev for `address`."""
        ...

    def close(self) -> None: ...
