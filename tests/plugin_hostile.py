"""A plug-in for tests/test_plugin_isolation.py (loaded through ARBITER_PLUGINS): one softmax candidate that hangs
and one that segfaults on every call, each ranked above NumPy's so that the gate tries them first."""
import ctypes
import time

from arbiter import Candidate, Tier, register


class HangsForever(Candidate):
    name, target, op, tier, priority = "hangs_forever", "cpu", "softmax", Tier.HAND_TUNED, 100

    def run(self, region, params):
        while True:  # a deadlock, as a plug-in waiting on a lock nobody releases
            time.sleep(1)


class Segfaults(Candidate):
    name, target, op, tier, priority = "segfaults", "cpu", "softmax", Tier.HAND_TUNED, 99

    def run(self, region, params):
        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a native extension's bad pointer


register(HangsForever())
register(Segfaults())
