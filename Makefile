# Shortcuts for the README's two commands.
.PHONY: demo test bench bench-doctor bench-exporter bench-place
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
bench:
	bash scripts/setup.sh --test && .venv/bin/python benchmarks/run.py
# doctor on the large host (16 GPUs, 256 CPUs, 500 VMs): target under 200 ms
bench-doctor:
	bash scripts/setup.sh --test && .venv/bin/python benchmarks/bench_doctor.py

bench-exporter:
	bash scripts/setup.sh --test && .venv/bin/python benchmarks/bench_exporter.py

# place --gpus 8 on the large host with free GPUs, after its snapshot: target under 200 ms
bench-place:
	bash scripts/setup.sh --test && .venv/bin/python benchmarks/bench_place.py
