# Shortcuts for the README's two commands.
.PHONY: demo test bench
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
bench:
	bash scripts/setup.sh --test && .venv/bin/python benchmarks/run.py
