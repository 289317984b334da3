"""`ember bench`: training benchmarks that report preparation, execution and completion
separately (`ember bench train --help`)."""
