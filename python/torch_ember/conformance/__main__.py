from .run import main

raise SystemExit(main(prog="python -m torch_ember.conformance"))
