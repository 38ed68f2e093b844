"""OpenFlow 1.3 driver: pure encoders (:mod:`.encode`), packet builders (:mod:`.packets`) and the
os-ken application that sends what they build (:mod:`.app`).

Importing this package does not import the os-ken app (only :mod:`.app` registers os-ken handlers).
"""
