"""Recipes: one YAML file that says which model, which data, which conversions, which targets, which gates."""
