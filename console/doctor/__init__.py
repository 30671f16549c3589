"""Host readiness (`nodeconsole doctor`): checks that are pure functions of one snapshot plus the files
they name, read through the root seam, so they run alike on a real host, a captured tree and the demo.

- model.py: the result types (CheckResult, Evidence, Fix, DoctorReport) and the check ids;
- facts.py: the paths the checks read and the values a ready host has;
- bootloader.py: which boot loader this host uses (detected, never guessed);
- run.py: `run_doctor(snapshot, root, role)`; checks_*.py: the checks, by group.
No Textual here: the Setup screen and the CLI render the same report.
"""
