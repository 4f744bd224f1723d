"""torchrun from Debian 12 (torch 1.13 on Python 3.11), with one classmethod fixed.

Debian's /usr/bin/torchrun fails at start on Python 3.11:
    AttributeError: 'NoneType' object has no attribute 'get'   (in to_map)
because Std.from_str("0") looks the value up by iterating the IntFlag, and
since Python 3.11 iterating a flag skips 0 (NONE) and multi-bit aliases (ALL),
so "0" and "3" map to None. This file replaces Std.from_str with the same
parsing done by value (Std(int(v))), then calls the real, unchanged
torch.distributed.run.main(): every other line of torchrun runs as shipped.
Run it with /usr/bin/python3, which torchrun's workers then inherit as
sys.executable.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def _from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")


api.Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402  (after the fix, on purpose)

if __name__ == "__main__":
    sys.exit(main())
