"""Real edge devices over SSH: the inventory, the device-side runner, and targets written `RUNTIME:DEVICE@NAME`.

Importing this package imports no framework and starts no connection.
"""

from __future__ import annotations
