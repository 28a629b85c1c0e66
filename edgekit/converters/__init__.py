"""The conversion driver, above the backends: `edgekit convert` and `quantize` plan the steps from the source's
format to the target's (the registry's converter edges), check the inputs and the calibration data, run each step's
converter (the converters themselves are the backends': edgekit/backends/<format>/), verify the written artifact
against its source (verify.py), and publish it atomically with its provenance (pipeline.py); a language model with its
KV cache takes causal_lm.py's path. The package keeps the name the design card gives it; nothing in it imports a
framework."""
