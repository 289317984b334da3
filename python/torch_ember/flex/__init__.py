"""FlexAttention on ember as fused kernels: program.py turns score_mod / mask_mod into programs,
hop.py is the flex_attention higher-order ops' ember kernel that runs them (or the dense
reference for what they cannot express)."""
