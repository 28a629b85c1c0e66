"""Benchmarks (not tests): each prints a table of ratios measured side by side and writes bench/results/."""
