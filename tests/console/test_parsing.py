"""Strict parsing of the user-facing syntaxes: CPU lists and PCI addresses."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeconsole.console.cpulist import format_cpulist, parse_cpulist, parse_cpumask
from nodeconsole.console.pciaddr import parse_pci_address


@pytest.mark.parametrize("text,expected", [
    ("0-3,8", (0, 1, 2, 3, 8)), ("", ()), ("5", (5,)), (" 1,1,0 ", (0, 1)), ("10-11,2", (2, 10, 11)),
])
def test_cpulist_ok(text, expected):
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize("text", ["0-3,x", "3-1", "-1", "1,,2", "0-", "a", "1-2-3", "99999999"])
def test_cpulist_rejects(text):
    with pytest.raises(ValueError) as e:
        parse_cpulist(text)
    assert repr(text.strip()) in str(e.value) or text.strip() in str(e.value)


@given(st.sets(st.integers(0, 600), max_size=80))
def test_cpulist_roundtrip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))


def test_cpumask():
    assert parse_cpumask("00000000,0000ff00") == tuple(range(8, 16))
    assert parse_cpumask("1,00000001") == (0, 32)


@pytest.mark.parametrize("text,expected", [
    ("0000:17:00.0", "0000:17:00.0"), ("17:00.0", "0000:17:00.0"), ("00000000:CA:00.1", "0000:ca:00.1"),
    ("10000:01:00.0", "10000:01:00.0"),
])
def test_pci_ok(text, expected):
    assert parse_pci_address(text) == expected


@pytest.mark.parametrize("text", ["../../etc", "0000:zz:00.0", "99", "0000:17:20.0", "0000:17:00.8", "", "17:00"])
def test_pci_rejects(text):
    with pytest.raises(ValueError):
        parse_pci_address(text)
