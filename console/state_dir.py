"""Where a host's audit log and lock live, and that directory's mode. console/seams.py chooses them once
per host (the demo's state directory, a captured tree's var/log/nodeconsole, the real host's
/var/log/nodeconsole); the audit writer (actions/audit.py) and its readers take them from the seams."""
from __future__ import annotations

AUDIT_NAME = "audit.jsonl"
DEFAULT_STATE = "/var/log/nodeconsole"  # audit log and lock of a real host
TREE_STATE = "var/log/nodeconsole"  # the same below a captured tree's root
STATE_DIR_MODE = 0o700  # the demo's state directory
AUDIT_DIR_MODE = 0o750  # /var/log/nodeconsole: root writes, the adm group may read
