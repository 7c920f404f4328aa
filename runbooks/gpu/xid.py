"""Xid errors from kernel log text (dmesg / journalctl -k), the only record of past Xids.

The NVIDIA driver logs each one as
  NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
Older drivers omit the pid/name part: "NVRM: Xid (PCI:0000:00:1e): 31, Ch 00000010, ...".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runbooks.gpu.probe import xid_meaning

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+),\s*(?P<rest>.*)")


@dataclass
class KernelXid:
    pci_bus: str
    xid: int
    meaning: str
    message: str


def parse_kernel_log(text: str) -> list[KernelXid]:
    found = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            xid = int(m["xid"])
            found.append(KernelXid(pci_bus=m["pci"], xid=xid, meaning=xid_meaning(xid),
                                   message=m["rest"].strip()))
    return found
