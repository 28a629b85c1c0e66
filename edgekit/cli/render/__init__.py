"""Tables for people, from the same dicts the JSON reports hold: a module per command (or family of commands),
and table.py for the console and what several share."""
