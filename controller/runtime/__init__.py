"""The controller process: load → compute → diff → apply.

:mod:`.state` is pure (no os-ken); :mod:`.process` starts os-ken lazily.
"""
