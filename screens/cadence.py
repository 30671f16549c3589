"""How often a screen re-reads what the poll does not bring (the audit log, the doctor's checks): at most
every REFRESH_S seconds while shown, at once when shown again or after a change."""
from __future__ import annotations

REFRESH_S = 5.0
