"""`ember sweep <kind>`: sweeps over other people's code (`models`: Hugging Face architectures;
`flex`: FlexAttention variants against a float64 reference)."""
import importlib
import sys

KINDS = {"models": "torch_ember.sweep.models", "flex": "torch_ember.sweep.flex"}


def main(argv=None, prog=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in KINDS:
        print(f"usage: {prog or 'ember sweep'} {{{','.join(KINDS)}}} [options]  (--help after the kind)",
              file=sys.stderr)
        return 2
    return importlib.import_module(KINDS[argv[0]]).main(argv[1:], prog=f"{prog or 'ember sweep'} {argv[0]}")
