"""The HTTP server behind ``transformer-serve``: checkpoints of every kind answering JSON
requests, decoded in dynamic batches, and a page that shows their outputs and attention.

``served`` turns a loaded task into a served model (the same predictors the command line uses),
``batcher`` gathers concurrent requests into one model call at a time, ``schemas`` writes the
API down as pydantic models, ``operations`` holds what running it takes (metrics, request ids,
the access line, the API key, giving memory back), and ``app`` is the FastAPI application with
the page from ``static/``. ``app`` and ``schemas`` need FastAPI, ``operations``
prometheus-client (``pip install -e ".[serve]"``); the others are plain Python and torch.
"""
