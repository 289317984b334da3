# The two commands of README.md. Both set up whatever is missing first (scripts/setup.sh).
.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

demo: setup
	@.venv/bin/python -m torch_ember.demo

test: setup
	@bash scripts/test.sh

bench: setup
	@for b in bench/*.py; do .venv/bin/python $$b; done
