# The two entry points of the README. Both set up what they need first.
.PHONY: demo test setup bench

demo:
	@bash scripts/setup.sh
	.venv/bin/nodeconsole --demo

test:
	@bash scripts/setup.sh --test
	.venv/bin/python -m pytest -q

bench:
	@bash scripts/setup.sh --test
	.venv/bin/python benchmarks/run.py
