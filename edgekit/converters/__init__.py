"""The conversion driver: plan the steps, check inputs and data, run the backends' converters, verify, publish."""
