"""The live view: a web page of the fabric served by the controller (``view.listen``), behind
the controller's TLS and the northbound's bearer tokens, updated by server-sent events.

* :mod:`~controller.view.frames`: what the page draws, as JSON-ready values (pure);
* :mod:`~controller.view.http`: a small HTTP/1.1 server on the event loop (bounded);
* :mod:`~controller.view.server`: the routes, the sign-in and the event streams;
* ``static/``: the page, its script and its style (plain SVG and ``EventSource``; no library,
  nothing fetched from elsewhere), shipped as package data.
"""
