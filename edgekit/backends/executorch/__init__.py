"""ExecuTorch: PyTorch's edge runtime. `.pte` programs lowered to the XNNPACK delegate (fp32, PT2E int8), run by
ExecuTorch's Python runtime. The whole backend lives in this package; the registry names it once."""
