"""Device profiles (data files) and the roofline cost model.

This layer sits *below* ``parastream.graph`` in the import direction: it imports nothing
from parastream except :mod:`parastream.errors`, and never torch. The cost model reads ops
duck-typed (``flops``, ``bytes_read``, ``bytes_written``, ``resource``, ``inputs``,
``outputs``, ``meta``), so any graph IR with those fields can be costed.
"""

from .cost import OpCost, estimate, normalize_dtype, with_cores
from .profile import (SCHEMA, Cores, DeviceProfile, dumps_profile, list_profiles, load_profile,
                      loads_profile)

__all__ = ["SCHEMA", "Cores", "DeviceProfile", "OpCost", "dumps_profile", "estimate",
           "list_profiles", "load_profile", "loads_profile", "normalize_dtype", "with_cores"]
